// The progress status of a long run -- done / running / queued, rate and time left -- in the one
// format every command prints (`rollout`, `eval`, `corpus validate`, `corpus synth`):
//
//   done 12/100 running 2 queued 86 | 3.4/s | 26s left
//
// corpus/cuda_agent_corpus/progress.py formats it the same way for the Python package run on
// its own, and writes status records into the progress file that `cuda-agent corpus` follows:
//
//   #status done=12 running=2 queued=86 elapsed=3.500 | 2 failed
//
// status_display draws such a status in place on a terminal (`\r...\x1b[K`, with ordinary lines
// printed above it) and as a plain line at most every few seconds when the stream is not one.
// Header-only: a few small functions shared by two commands.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include <fmt/format.h>

namespace cuda_agent::cli {

inline constexpr const char* status_marker = "#status ";

// 42s, 3m05s, 2h07m: the two leading units.
inline std::string format_duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
}

// Per second from one a second up, per minute below (0.4/s reads worse than 24.0/min).
inline std::string format_rate(double per_second) {
  if (per_second >= 1.0) return fmt::format("{:.1f}/s", per_second);
  return fmt::format("{:.1f}/min", per_second * 60.0);
}

// 3.4/s | 26s left: `fresh` done in `elapsed_s`, and what `remaining` takes at that rate.
inline std::string format_pace(int64_t fresh, int64_t remaining, double elapsed_s) {
  if (fresh <= 0 || elapsed_s <= 0) return "rate - | time left -";
  const double rate = static_cast<double>(fresh) / elapsed_s;
  return fmt::format("{} | {} left", format_rate(rate), format_duration(static_cast<double>(remaining) / rate));
}

// done 12/100 running 2 queued 86 | 3.4/s | 26s left. The rate counts what was done since the
// start, less `done_at_start` (what a resumed run found settled).
inline std::string format_progress(int64_t done, int64_t running, int64_t queued, double elapsed_s,
                                   int64_t done_at_start = 0) {
  return fmt::format("done {}/{} running {} queued {} | {}", done, done + running + queued, running, queued,
                     format_pace(done - done_at_start, running + queued, elapsed_s));
}

// A run's clock, from construction, and what was already done then (a resumed run's settled
// episodes), which the rate leaves out.
class progress_meter {
 public:
  explicit progress_meter(int64_t done_at_start = 0)
      : done_at_start_(done_at_start), start_(std::chrono::steady_clock::now()) {}

  std::string line(int64_t done, int64_t running, int64_t queued) const {
    return format_progress(done, running, queued, elapsed_s(), done_at_start_);
  }

  // Only the rate and time left (format_pace) of `done` of `done + remaining`.
  std::string pace(int64_t done, int64_t remaining) const {
    return format_pace(done - done_at_start_, remaining, elapsed_s());
  }

 private:
  double elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

  int64_t done_at_start_;
  std::chrono::steady_clock::time_point start_;
};

// The status text of a `#status done=.. running=.. queued=.. elapsed=.. [| tail]` record, or
// nothing when `record` is not one.
inline std::optional<std::string> render_status_record(const std::string& record) {
  const std::string marker = status_marker;
  if (record.compare(0, marker.size(), marker) != 0) return std::nullopt;
  const std::size_t bar = record.find(" | ", marker.size());
  std::istringstream fields{record.substr(marker.size(), bar == std::string::npos
                                                             ? std::string::npos
                                                             : bar - marker.size())};
  int64_t done = -1, running = -1, queued = -1;
  double elapsed = -1;
  for (std::string field; fields >> field;) {
    const std::size_t eq = field.find('=');
    if (eq == std::string::npos) return std::nullopt;
    const std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    try {
      if (key == "done") done = std::stoll(value);
      else if (key == "running") running = std::stoll(value);
      else if (key == "queued") queued = std::stoll(value);
      else if (key == "elapsed") elapsed = std::stod(value);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  if (done < 0 || running < 0 || queued < 0 || elapsed < 0) return std::nullopt;
  std::string text = format_progress(done, running, queued, elapsed);
  if (bar != std::string::npos) text += record.substr(bar);
  return text;
}

// One status line under a stream of ordinary lines. On a terminal the status is redrawn in
// place and lines are printed above it; otherwise each status is a plain line, at most one per
// `plain_interval` (the latest is printed by finish() if it was held back).
class status_display {
 public:
  status_display(std::ostream& out, bool tty, std::chrono::milliseconds plain_interval)
      : out_(out), tty_(tty), plain_interval_(plain_interval) {}

  void status(const std::string& text) {
    pending_ = text;
    const auto now = std::chrono::steady_clock::now();
    if (!tty_ && shown_once_ && now - shown_at_ < plain_interval_) return;
    show(now);
  }

  void line(const std::string& text) {
    if (drawn_) out_ << "\r\x1b[K";
    out_ << text << '\n';
    if (drawn_) out_ << '\r' << shown_ << "\x1b[K";
    out_ << std::flush;
  }

  void finish() {
    if (!pending_.empty()) show(std::chrono::steady_clock::now());
    if (drawn_) out_ << '\n' << std::flush;
    drawn_ = false;
  }

 private:
  void show(std::chrono::steady_clock::time_point now) {
    shown_ = pending_;
    pending_.clear();
    shown_at_ = now;
    shown_once_ = true;
    if (tty_) {
      out_ << '\r' << shown_ << "\x1b[K" << std::flush;
      drawn_ = true;
    } else {
      out_ << shown_ << '\n' << std::flush;
    }
  }

  std::ostream& out_;
  bool tty_;
  std::chrono::milliseconds plain_interval_;
  std::string pending_, shown_;
  std::chrono::steady_clock::time_point shown_at_;
  bool shown_once_ = false, drawn_ = false;
};

}  // namespace cuda_agent::cli
