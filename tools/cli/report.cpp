#include "tools/cli/report.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>

#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/message_log/reader.hpp"
#include "messages/codec.hpp"
#include "messages/episode_id.hpp"
#include "messages/reward.hpp"
#include "messages/roles.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/run_summary.hpp"

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;
namespace ml = message_log;
using json = nlohmann::json;

// Texts the page shows in full are cut here, so that a run with long tool outputs still gives a
// page a browser opens quickly; the cut says how much was left out.
constexpr std::size_t kExcerptChars = 4000;
constexpr std::size_t kFileChars = 200000;

std::string excerpt(const std::string& text, std::size_t limit = kExcerptChars) {
  if (text.size() <= limit) return text;
  return text.substr(0, limit) + fmt::format("\n... [{} more bytes in the log]", text.size() - limit);
}

json number_or_null(double x) { return std::isfinite(x) ? json(x) : json(nullptr); }

// --- Episode ids -------------------------------------------------------------------------------

// --- What one episode's records say ----------------------------------------------------------

// The files an episode wrote, replayed from its successful Write, Edit and MultiEdit calls. An
// Edit of a file the log never saw whole (a template file it did not Read in full) leaves the
// file's text unknown rather than guessed.
struct file_state {
  std::string content;
  bool known = false;
  int writes = 0;
  std::string note;
};

struct open_call {
  tool_call call;
  json args;
  int64_t ts_ns = 0;
  bool routed = false;
};

struct timeline_event {
  std::string kind;  // turn, tool, build, verify, profile, evaluate
  std::string label;
  int64_t start_ns = 0;
  int64_t end_ns = -1;  // -1: no answer in the log
  double reported_ms = not_measured;  // the duration the answer itself reports
  bool ok = true;
  std::string detail;
};

struct episode_log {
  std::string id;
  episode_id_parts name;
  std::optional<task_spec> task;
  std::optional<episode_started> started;
  std::optional<episode_ended> ended;
  std::optional<reward_record> verdict;
  int64_t first_ns = 0, last_ns = 0, ended_ns = 0;
  std::vector<timeline_event> events;
  int64_t policy_asked_ns = -1;
  std::map<std::string, open_call> calls;        // call id -> its request
  std::map<std::string, std::size_t> open_jobs;  // job id -> index into events
  std::map<std::string, file_state> files;
  int shell_commands = 0;  // Bash commands run in the sandbox: files they wrote are not in the log
};

// A job's stay in a pool: from the episode's request to the pool's answer (waiting included).
struct pool_job {
  std::string pool;  // compiler, gpu
  std::string kind;
  std::string episode;
  int64_t start_ns = 0;
  int64_t end_ns = -1;
};

struct report_log {
  fs::path dir;
  uint64_t records = 0;
  int64_t first_ns = 0, last_ns = 0;
  bool incomplete_tail = false;
  std::vector<std::string> runs;  // in the order of their last record: the most recent run last
  std::map<std::string, episode_log> episodes;  // of the chosen run
  std::vector<std::string> episode_order;        // first record first
  std::vector<learner_update> updates;
  std::vector<int64_t> update_ns;
  uint64_t undecodable = 0;
  std::string first_decode_error;
};

std::string normalize_path(std::string path) {
  if (path.rfind("/workdir/", 0) == 0) path = path.substr(9);
  while (path.rfind("./", 0) == 0) path = path.substr(2);
  return path;
}

// A whole file from a Read's output (cat -n lines), or nothing when the Read showed part of it.
std::optional<std::string> file_from_read(const std::string& output) {
  if (output.find("\n[showing lines ") != std::string::npos || output.find("... [line cut: ") != std::string::npos)
    return std::nullopt;
  if (output.rfind("(", 0) == 0 && output.find(" is empty)") != std::string::npos) return std::string{};
  std::string content;
  std::size_t at = 0;
  while (at < output.size()) {
    auto end = output.find('\n', at);
    if (end == std::string::npos) end = output.size();
    const auto tab = output.find('\t', at);
    if (tab == std::string::npos || tab > end) return std::nullopt;  // not a numbered line
    content.append(output, tab + 1, end - tab - 1);
    content += '\n';
    at = end + 1;
  }
  return content;
}

// Applies Edit's rule (unique unless replace_all) as the tool did; false where the log's text
// of the file does not allow it (the tool saw a different file), which makes the file unknown.
bool apply_edit(std::string& content, const json& edit) {
  const std::string old_text = edit.value("old_string", std::string{});
  const std::string new_text = edit.value("new_string", std::string{});
  const bool all = edit.value("replace_all", false);
  if (old_text.empty()) return false;
  std::string out;
  std::size_t from = 0, count = 0;
  for (auto pos = content.find(old_text); pos != std::string::npos; pos = content.find(old_text, from)) {
    out.append(content, from, pos - from);
    out += new_text;
    from = pos + old_text.size();
    ++count;
    if (!all) break;
  }
  if (count == 0) return false;
  out.append(content, from, std::string::npos);
  content = std::move(out);
  return true;
}

void replay_file_tool(episode_log& e, const open_call& c, const tool_result& result) {
  const std::string path = normalize_path(c.args.value("file_path", std::string{}));
  if (path.empty() || result.is_error) return;
  if (c.call.tool == "Read") {
    auto& f = e.files[path];  // a Read gives a base for later edits; the file is listed only once written
    if (!f.known)
      if (auto text = file_from_read(result.output)) {
        f.content = *text;
        f.known = true;
      }
    return;
  }
  auto& f = e.files[path];
  ++f.writes;
  if (c.call.tool == "Write") {
    f.content = c.args.value("content", std::string{});
    f.known = true;
    f.note.clear();
    return;
  }
  std::vector<json> edits;
  if (c.call.tool == "Edit") edits.push_back(c.args);
  if (c.call.tool == "MultiEdit" && c.args.contains("edits") && c.args["edits"].is_array())
    for (const auto& edit : c.args["edits"]) edits.push_back(edit);
  if (!f.known) {
    f.note = "edited, but the log holds no whole earlier version of it to apply the edits to";
    return;
  }
  for (const auto& edit : edits)
    if (!apply_edit(f.content, edit)) {
      f.known = false;
      f.note = "an edit does not apply to the text the log holds for it";
      return;
    }
}

std::string call_label(const tool_call& call, const json& args) {
  for (const char* key : {"command", "file_path", "pattern", "path", "shell_id"})
    if (args.contains(key) && args[key].is_string()) return call.tool + " " + args[key].get<std::string>();
  return call.tool;
}

timeline_event& open_job(episode_log& e, const std::string& job_id, const std::string& kind, int64_t ts,
                         std::string label) {
  e.open_jobs[job_id] = e.events.size();
  e.events.push_back({kind, std::move(label), ts, -1, not_measured, true, {}});
  return e.events.back();
}

timeline_event* close_job(episode_log& e, const std::string& job_id, int64_t ts) {
  const auto it = e.open_jobs.find(job_id);
  if (it == e.open_jobs.end()) return nullptr;
  auto& event = e.events[it->second];
  event.end_ns = ts;
  e.open_jobs.erase(it);
  return &event;
}

std::string timing_text(const char* what, const timing_stats& t) {
  return std::isfinite(t.median_ms) ? fmt::format("{} {:.4g} ms", what, t.median_ms) : fmt::format("{} n/a", what);
}

// One record of the chosen run's episode.
void add_record(episode_log& e, const ml::record_view& r) {
  const std::string_view type = r.type;
  const int64_t ts = r.ts_ns;
  if (type == "task_spec") {
    e.task = decode<task_spec>(r.payload);
  } else if (type == "episode_started") {
    e.started = decode<episode_started>(r.payload);
  } else if (type == "episode_ended") {
    e.ended = decode<episode_ended>(r.payload);
    e.ended_ns = ts;
  } else if (type == "reward_record" && r.receiver == role::rollout) {
    e.verdict = decode<reward_record>(r.payload);
  } else if (type == "policy_request") {
    e.policy_asked_ns = ts;  // not decoded: it is the whole conversation so far
  } else if (type == "policy_response") {
    const auto response = decode<policy_response>(r.payload);
    std::string calls;
    for (const auto& c : response.tool_calls) calls += (calls.empty() ? "" : ", ") + c.tool;
    timeline_event event{"turn", fmt::format("turn {}", response.turn), e.policy_asked_ns >= 0 ? e.policy_asked_ns : ts,
                         ts, not_measured, response.finish_reason != "error", {}};
    event.detail = fmt::format("{} prompt + {} completion tokens, finish {}{}{}", response.prompt_tokens,
                               response.completion_tokens, response.finish_reason.empty() ? "-" : response.finish_reason,
                               calls.empty() ? "" : "; calls " + calls,
                               response.content.empty() ? "" : "\n" + excerpt(response.content, 1200));
    e.events.push_back(std::move(event));
    e.policy_asked_ns = -1;
  } else if (type == "tool_request") {
    auto request = decode<tool_request>(r.payload);
    open_call c;
    c.args = json::parse(request.call.arguments_json, nullptr, false);
    if (!c.args.is_object()) c.args = json::object();
    c.call = std::move(request.call);
    c.ts_ns = ts;
    c.routed = r.receiver == role::router;
    if (c.call.tool == "Bash" && !c.routed) ++e.shell_commands;
    e.calls[c.call.call_id] = std::move(c);
  } else if (type == "tool_result") {
    const auto result = decode<tool_result>(r.payload);
    const auto it = e.calls.find(result.call_id);
    timeline_event event{"tool", result.tool, ts, ts, result.duration_ms, !result.is_error, {}};
    if (it != e.calls.end()) {
      event.label = call_label(it->second.call, it->second.args);
      event.start_ns = it->second.ts_ns;
      replay_file_tool(e, it->second, result);
    }
    event.detail = fmt::format("exit {}{}{}\n{}", result.exit_code, result.is_error ? ", error" : "",
                               result.truncated ? ", output truncated" : "", excerpt(result.output));
    e.events.push_back(std::move(event));
    if (it != e.calls.end()) e.calls.erase(it);
  } else if (type == "compile_job") {
    open_job(e, decode<compile_job>(r.payload).job_id, "build", ts, "build");
  } else if (type == "compile_result") {
    const auto built = decode<compile_result>(r.payload);
    if (auto* event = close_job(e, built.job_id, ts)) {
      event->ok = built.ok;
      event->reported_ms = built.duration_ms;
      event->label = built.ok ? (built.cache_hit ? "build (cached)" : "build") : "build failed";
      event->detail = excerpt(built.ok ? built.module_path : (built.diagnostics.empty() ? built.error : built.diagnostics));
    }
  } else if (type == "verify_job") {
    open_job(e, decode<verify_job>(r.payload).job_id, "verify", ts, "verify");
  } else if (type == "verify_result") {
    const auto verdict = decode<verify_result>(r.payload);
    if (auto* event = close_job(e, verdict.job_id, ts)) {
      event->ok = verdict.correct && verdict.violations.empty();
      event->reported_ms = verdict.duration_ms;
      event->label = event->ok ? "verify: correct" : "verify: failed";
      std::string text;
      for (const auto& v : verdict.violations) text += "violation: " + v + "\n";
      event->detail = excerpt(text + verdict.error);
    }
  } else if (type == "profile_job") {
    open_job(e, decode<profile_job>(r.payload).job_id, "profile", ts, "profile");
  } else if (type == "profile_result") {
    const auto timing = decode<profile_result>(r.payload);
    if (auto* event = close_job(e, timing.job_id, ts)) {
      event->ok = timing.error.empty();
      event->detail = timing_text("eager", timing.eager) + ", " + timing_text("compile", timing.compiled) + ", " +
                      timing_text("candidate", timing.candidate) + (timing.error.empty() ? "" : "\n" + excerpt(timing.error));
    }
  } else if (type == "evaluate_job") {
    open_job(e, decode<evaluate_job>(r.payload).job_id, "evaluate", ts, "final evaluation");
  } else if (type == "reward_record") {  // gpu -> episode: the final evaluation's answer
    const auto verdict = decode<reward_record>(r.payload);
    if (auto* event = close_job(e, verdict.job_id, ts)) {
      event->ok = verdict.reward >= 1;
      event->label = fmt::format("final evaluation: reward {}", verdict.reward);
      event->detail = excerpt(verdict.error);
    }
  }
}

// --- Reading the log ---------------------------------------------------------------------------

[[noreturn]] void corrupt(const fs::path& dir, const ml::reader& log) {
  throw usage_error{fmt::format("report: the message log {} is corrupt: {} (`cuda-agent log stats {}` shows "
                                "what is readable; report on an intact copy of the log)",
                                dir.string(), log.problem().message(), dir.string())};
}

// The runs of the log's episodes, in the order of their last record (so the last is the most
// recent run), without decoding any payload.
std::vector<std::string> list_runs(const fs::path& dir) {
  ml::reader log = ml::reader::open(dir);
  ml::record_view r;
  ml::read_status status;
  std::map<std::string, uint64_t> last_start;
  while ((status = log.next(r)) == ml::read_status::record) {
    if (r.episode.empty()) continue;
    if (auto name = parse_episode_id(std::string{r.episode})) last_start[name->run_id] = r.seq;
  }
  if (status == ml::read_status::corrupt) corrupt(dir, log);
  std::vector<std::string> runs;
  for (const auto& [run, seq] : last_start) runs.push_back(run);
  std::sort(runs.begin(), runs.end(), [&](const auto& a, const auto& b) { return last_start[a] < last_start[b]; });
  return runs;
}

void check_log_dir(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec))
    throw usage_error{fmt::format("report: no such directory {} (give the message log directory of a run: "
                                  "rollout's --log, default runs/log, or eval's DIR/log)",
                                  dir.string())};
  if (!fs::is_directory(dir, ec))
    throw usage_error{fmt::format("report: {} is a file, not a message log directory (give the directory "
                                  "that holds the *.seg segments: rollout's --log, or eval's DIR/log)",
                                  dir.string())};
  if (ml::list_segments(dir).empty())
    throw usage_error{fmt::format("report: {} is not a message log: it holds no *{} segments (give the "
                                  "directory a rollout wrote with --log, or eval's DIR/log)",
                                  dir.string(), ml::kSegmentSuffix)};
}

report_log read_log(const fs::path& dir, std::string& run_id) {
  check_log_dir(dir);
  report_log out;
  out.dir = dir;
  out.runs = list_runs(dir);
  if (run_id.empty()) {
    if (out.runs.empty()) {
      ml::reader probe = ml::reader::open(dir);
      ml::record_view r;
      if (probe.next(r) != ml::read_status::record)
        throw usage_error{fmt::format("report: the message log {} is empty: it holds no records (run a rollout "
                                      "into it first: cuda-agent rollout --log {})",
                                      dir.string(), dir.string())};
      throw usage_error{fmt::format("report: the message log {} holds no episode of any run (`cuda-agent log "
                                    "stats {}` lists what it holds)",
                                    dir.string(), dir.string())};
    }
    run_id = out.runs.back();
  } else if (std::find(out.runs.begin(), out.runs.end(), run_id) == out.runs.end()) {
    std::string known;
    for (const auto& r : out.runs) known += (known.empty() ? "" : ", ") + r;
    throw usage_error{fmt::format("report: the message log {} holds no episode of run '{}' (it holds {}; "
                                  "--run-id picks one)",
                                  dir.string(), run_id, known.empty() ? "none" : known)};
  }

  ml::reader log = ml::reader::open(dir);
  ml::record_view r;
  ml::read_status status;
  const std::string prefix = run_id + "-";
  while ((status = log.next(r)) == ml::read_status::record) {
    if (out.records++ == 0) out.first_ns = r.ts_ns;
    out.last_ns = r.ts_ns;
    try {
      if (r.episode.empty()) {
        if (r.type == "learner_update") {
          out.updates.push_back(decode<learner_update>(r.payload));
          out.update_ns.push_back(r.ts_ns);
        }
        continue;
      }
      if (r.episode.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string id{r.episode};
      const auto name = parse_episode_id(id);
      if (!name || name->run_id != run_id) continue;  // "<run>-x-NNNN" belongs to run "<run>-x"
      auto [it, fresh] = out.episodes.try_emplace(id);
      episode_log& e = it->second;
      if (fresh) {
        e.id = id;
        e.name = *name;
        e.first_ns = r.ts_ns;
        out.episode_order.push_back(id);
      }
      e.last_ns = r.ts_ns;
      add_record(e, r);
    } catch (const std::exception& error) {  // a record of an older or newer protocol: left out, counted
      if (out.undecodable++ == 0)
        out.first_decode_error = fmt::format("seq {} ({}): {}", r.seq, std::string{r.type}, error.what());
    }
  }
  if (status == ml::read_status::corrupt) corrupt(dir, log);
  out.incomplete_tail = status == ml::read_status::incomplete_tail;
  return out;
}

// As rollout_manager settles them (and `rollout --resume` reads them back): per index, the first
// attempt the agent ended; else the last attempt, which ended in an infrastructure failure or
// not at all in the log (abandoned, or the run was stopped: counted as a failure of ours too).
std::vector<episode_summary> settled_from_log(const report_log& log) {
  std::map<int32_t, std::vector<const episode_log*>> by_index;
  for (const auto& id : log.episode_order) {
    const auto& e = log.episodes.at(id);
    if (e.task) by_index[e.name.index].push_back(&e);
  }
  std::vector<std::pair<int64_t, episode_summary>> settled;  // by when they settled
  for (const auto& [index, attempts] : by_index) {
    const episode_log* chosen = nullptr;
    std::vector<const episode_log*> ended(attempts);
    std::stable_sort(ended.begin(), ended.end(), [](const auto* a, const auto* b) {
      const int64_t ta = a->ended ? a->ended_ns : a->last_ns, tb = b->ended ? b->ended_ns : b->last_ns;
      return ta < tb;
    });
    for (const auto* e : ended)
      if (e->ended && e->ended->reason != termination::infrastructure_failure) {
        chosen = e;
        break;
      }
    if (!chosen) chosen = ended.back();
    episode_summary s;
    s.episode_id = chosen->id;
    s.index = index;
    s.task = *chosen->task;
    s.attempts = chosen->name.retry + 1;
    if (chosen->ended) {
      s.ended = *chosen->ended;
    } else {
      s.ended.episode_id = chosen->id;
      s.ended.reason = termination::infrastructure_failure;
      s.ended.error = "the episode did not end in the log (abandoned after a failure of ours, or the run stopped)";
    }
    if (chosen->verdict) s.verdict = *chosen->verdict;
    s.verdict.episode_id = chosen->id;
    settled.emplace_back(chosen->ended ? chosen->ended_ns : chosen->last_ns, std::move(s));
  }
  std::stable_sort(settled.begin(), settled.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<episode_summary> out;
  for (auto& [ts, s] : settled) out.push_back(std::move(s));
  return out;
}

// --- The blob -----------------------------------------------------------------------------------

double ms_between(int64_t from_ns, int64_t to_ns) { return static_cast<double>(to_ns - from_ns) / 1e6; }

json episode_json(const episode_log& e, const episode_summary* settled, const std::string& counted_as) {
  const int64_t t0 = e.started ? e.started->started_at_ns : e.first_ns;
  const task_spec task = settled ? settled->task : e.task.value_or(task_spec{});
  json out{{"id", e.id},
           {"index", e.name.index},
           {"retry", e.name.retry},
           {"resume", e.name.resume},
           {"task", task.id},
           {"task_name", task.name},
           {"level", task.level},
           {"counted", counted_as},
           {"start_ns", t0},
           {"policy", e.started ? e.started->policy : std::string{}},
           {"device", e.started ? e.started->device : std::string{}}};
  const episode_ended* ended = settled ? &settled->ended : (e.ended ? &*e.ended : nullptr);
  if (ended) {
    out["reason"] = to_string(ended->reason);
    out["turns"] = ended->turns;
    out["tokens"] = ended->tokens;
    out["wall_ms"] = number_or_null(ended->wall_ms);
    out["error"] = ended->error;
  } else {
    out["reason"] = "not ended";
  }
  const reward_record* verdict = settled ? &settled->verdict : (e.verdict ? &*e.verdict : nullptr);
  out["verdict"] = verdict ? check_json(*verdict) : json(nullptr);

  json events = json::array();
  for (const auto& ev : e.events)
    events.push_back({{"kind", ev.kind},
                      {"label", ev.label},
                      {"start_ms", ms_between(t0, ev.start_ns)},
                      {"end_ms", ev.end_ns >= 0 ? json(ms_between(t0, ev.end_ns)) : json(nullptr)},
                      {"reported_ms", number_or_null(ev.reported_ms)},
                      {"ok", ev.ok},
                      {"detail", ev.detail}});
  out["events"] = std::move(events);
  json files = json::array();
  for (const auto& [path, f] : e.files) {
    if (f.writes == 0) continue;  // only Read
    files.push_back({{"path", path},
                     {"writes", f.writes},
                     {"content", f.known ? json(excerpt(f.content, kFileChars)) : json(nullptr)},
                     {"note", f.note}});
  }
  out["files"] = std::move(files);
  json notes = json::array();
  if (e.shell_commands > 0)
    notes.push_back(fmt::format("{} Bash command(s) ran in the sandbox: a file one of them changed is shown as "
                                "the Write/Edit calls left it",
                                e.shell_commands));
  out["notes"] = std::move(notes);
  return out;
}

// Jobs in flight per pool over the run: a step series [ms since the run's start, jobs].
json pools_json(const report_log& log, int64_t t0, int64_t t_end) {
  std::map<std::string, std::vector<std::pair<int64_t, int>>> steps;
  std::map<std::string, int> jobs;
  std::map<std::string, double> busy_ms;
  for (const auto& id : log.episode_order) {
    const auto& e = log.episodes.at(id);
    for (const auto& ev : e.events) {
      std::string pool;
      if (ev.kind == "build") pool = "compiler";
      if (ev.kind == "verify" || ev.kind == "profile" || ev.kind == "evaluate") pool = "gpu";
      if (pool.empty()) continue;
      const int64_t end = ev.end_ns >= 0 ? ev.end_ns : t_end;
      steps[pool].emplace_back(ev.start_ns, +1);
      steps[pool].emplace_back(end, -1);
      ++jobs[pool];
      busy_ms[pool] += ms_between(ev.start_ns, end);
    }
  }
  json out{{"span_ms", ms_between(t0, t_end)}};
  for (const char* pool : {"compiler", "gpu"}) {
    auto& s = steps[pool];
    std::sort(s.begin(), s.end());  // at one instant an end (-1) comes before a start
    json series = json::array({json::array({0.0, 0})});
    int in_flight = 0, peak = 0;
    for (const auto& [ts, delta] : s) {
      in_flight += delta;
      peak = std::max(peak, in_flight);
      series.push_back(json::array({ms_between(t0, ts), in_flight}));
    }
    series.push_back(json::array({ms_between(t0, t_end), in_flight}));
    out[pool] = {{"jobs", jobs[pool]}, {"peak", peak}, {"job_ms", busy_ms[pool]}, {"series", std::move(series)}};
  }
  return out;
}

std::vector<json> read_jsonl(const fs::path& path) {
  std::vector<json> lines;
  std::ifstream in{path};
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = json::parse(line, nullptr, false);
    if (j.is_discarded()) break;  // a line torn by a kill ends what can be trusted
    lines.push_back(std::move(j));
  }
  return lines;
}

json learning_json(const report_request& request, const report_log& log, std::vector<std::string>& notes) {
  fs::path metrics = request.metrics;
  if (metrics.empty()) {
    for (const auto& candidate : {request.log_dir / "metrics.jsonl", request.log_dir.parent_path() / "metrics.jsonl"}) {
      std::error_code ec;
      if (fs::is_regular_file(candidate, ec)) {
        metrics = candidate;
        break;
      }
    }
  }
  json out = json::object();
  if (!metrics.empty()) {
    out["metrics_path"] = metrics.string();
    out["metrics"] = read_jsonl(metrics);
    const fs::path evals = metrics.parent_path() / "eval.jsonl";
    std::error_code ec;
    if (fs::is_regular_file(evals, ec)) {
      out["evals_path"] = evals.string();
      out["evals"] = read_jsonl(evals);
    }
  }
  if (!log.updates.empty()) {
    json updates = json::array();
    for (std::size_t i = 0; i < log.updates.size(); ++i) {
      const auto& u = log.updates[i];
      updates.push_back({{"step", u.step},
                         {"phase", to_string(u.phase)},
                         {"weight_version", u.weight_version},
                         {"samples", u.samples},
                         {"loss", number_or_null(u.loss)},
                         {"policy_loss", number_or_null(u.policy_loss)},
                         {"value_loss", number_or_null(u.value_loss)},
                         {"kl", number_or_null(u.kl)},
                         {"entropy", number_or_null(u.entropy)},
                         {"clip_fraction", number_or_null(u.clip_fraction)},
                         {"ts_ns", log.update_ns[i]}});
    }
    out["updates"] = std::move(updates);
  }
  if (out.empty()) {
    notes.push_back("no training metrics: no metrics.jsonl beside the log and no learner_update record in it");
    return nullptr;
  }
  return out;
}

}  // namespace

json report_data(const report_request& request) {
  if (!request.metrics.empty()) {
    std::error_code ec;
    if (!fs::is_regular_file(request.metrics, ec))
      throw usage_error{fmt::format("report: --metrics {}: no such file (train writes DIR/metrics.jsonl)",
                                    request.metrics.string())};
  }
  std::string run_id = request.run_id;
  const report_log log = read_log(request.log_dir, run_id);

  const std::vector<episode_summary> rebuilt = request.settled ? std::vector<episode_summary>{} : settled_from_log(log);
  const std::vector<episode_summary>& settled = request.settled ? *request.settled : rebuilt;
  std::map<std::string, const episode_summary*> settled_by_id;
  for (const auto& s : settled) settled_by_id[s.episode_id] = &s;

  std::vector<std::string> notes;
  json episodes = json::array();
  int64_t t0 = 0, t_end = 0;
  std::vector<const episode_log*> ordered;
  for (const auto& id : log.episode_order) ordered.push_back(&log.episodes.at(id));
  std::stable_sort(ordered.begin(), ordered.end(), [](const auto* a, const auto* b) {
    return std::tie(a->name.index, a->first_ns) < std::tie(b->name.index, b->first_ns);
  });
  for (const auto* e : ordered) {
    t0 = t0 == 0 ? e->first_ns : std::min(t0, e->first_ns);
    t_end = std::max(t_end, e->last_ns);
    const auto it = settled_by_id.find(e->id);
    const episode_summary* s = it == settled_by_id.end() ? nullptr : it->second;
    const std::string counted = !s ? "superseded"
                                : s->ended.reason == termination::infrastructure_failure ? "infrastructure failure"
                                                                                       : "counted";
    auto j = episode_json(*e, s, counted);
    j["start_ms"] = 0.0;  // filled below, once the run's start is known
    episodes.push_back(std::move(j));
  }
  for (std::size_t i = 0; i < ordered.size(); ++i)
    episodes[i]["start_ms"] = ms_between(t0, episodes[i]["start_ns"].get<int64_t>());

  if (log.undecodable > 0)
    notes.push_back(fmt::format("{} record(s) of this run could not be decoded and are left out; the first: {}",
                                log.undecodable, log.first_decode_error));
  if (log.incomplete_tail)
    notes.push_back("the log ends inside a record (a writer was appending, or a crash tore its tail); records "
                    "before it are shown");

  json run{{"run_id", run_id},
           {"log", request.log_dir.string()},
           {"runs_in_log", log.runs},
           {"records", log.records},
           {"first_ns", t0},
           {"last_ns", t_end},
           {"generated_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count()}};
  for (const auto* e : ordered)  // what the log says; the rollout's own run_info below may say more
    if (e->started) {
      run["policy"] = e->started->policy;
      run["device"] = e->started->device;
      break;
    }
  if (request.run_info.is_object())
    for (const auto& [key, value] : request.run_info.items()) run[key] = value;

  json data{{"run", std::move(run)},
            {"summary", summary_json(summarize(settled))},
            {"episodes", std::move(episodes)},
            {"pools", pools_json(log, t0, t_end)}};
  data["learning"] = learning_json(request, log, notes);
  data["notes"] = notes;
  return data;
}

std::string render_report(const json& data) {
  // Invalid UTF-8 in a log's strings must not stop a report; '<' only occurs inside JSON strings,
  // where \u003c means the same.
  const std::string text = data.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string blob;
  blob.reserve(text.size() + text.size() / 16);
  for (char c : text) {
    if (c == '<')
      blob += "\\u003c";
    else
      blob += c;
  }
  std::string page = report_template_html();
  const std::string marker = "__REPORT_DATA_JSON__";
  const auto at = page.find(marker);
  if (at == std::string::npos) throw std::logic_error{"the report template has no data marker"};
  page.replace(at, marker.size(), blob);
  return page;
}

json write_report(const report_request& request, const fs::path& out) {
  std::error_code ec;
  if (fs::is_directory(out, ec))
    throw usage_error{fmt::format("report: --out {} is a directory; give the file to write, e.g. {}",
                                  out.string(), (out / "report.html").string())};
  json data = report_data(request);
  const std::string page = render_report(data);
  if (out.has_parent_path()) fs::create_directories(out.parent_path(), ec);
  const fs::path temp = out.string() + ".tmp";
  {
    std::ofstream file{temp, std::ios::binary | std::ios::trunc};
    file << page;
    file.flush();
    if (!file) throw usage_error{fmt::format("report: cannot write {} (does its folder exist and is it writable?)",
                                             temp.string())};
  }
  fs::rename(temp, out, ec);
  if (ec) throw usage_error{fmt::format("report: cannot write {}: {}", out.string(), ec.message())};
  return data;
}

}  // namespace cuda_agent::cli
