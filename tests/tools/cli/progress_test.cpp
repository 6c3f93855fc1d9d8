// tools/cli/progress.hpp: the status format, the records the corpus package writes, and the
// display on a terminal (redrawn in place) and off one (plain lines, throttled).
#include "tools/cli/progress.hpp"

#include <sstream>

#include <gtest/gtest.h>

namespace cuda_agent::cli {
namespace {

TEST(ProgressFormat, RateAndTimeLeft) {
  EXPECT_EQ(format_progress(0, 2, 8, 5.0), "done 0/10 running 2 queued 8 | rate - | time left -");
  EXPECT_EQ(format_progress(30, 2, 68, 10.0), "done 30/100 running 2 queued 68 | 3.0/s | 23s left");
  EXPECT_EQ(format_progress(3, 1, 6, 60.0), "done 3/10 running 1 queued 6 | 3.0/min | 2m20s left");
  // A resumed run's settled episodes are not counted in the rate.
  EXPECT_EQ(format_progress(12, 0, 4000, 3600.0, 2), "done 12/4012 running 0 queued 4000 | 0.2/min | 400h00m left");
  EXPECT_EQ(format_duration(59.5), "1m00s");
  EXPECT_EQ(format_duration(7260), "2h01m");
}

TEST(ProgressFormat, StatusRecordsAreRenderedAndOtherLinesAreNot) {
  EXPECT_EQ(render_status_record("#status done=3 running=1 queued=6 elapsed=2.500 | 1 failed"),
            "done 3/10 running 1 queued 6 | 1.2/s | 6s left | 1 failed");
  EXPECT_EQ(render_status_record("#status done=0 running=0 queued=1 elapsed=0.000"),
            "done 0/1 running 0 queued 1 | rate - | time left -");
  EXPECT_FALSE(render_status_record("ok   task_a  out [[4, 8]]  0.10 ms"));
  EXPECT_FALSE(render_status_record("#status done=3 running=1"));               // fields missing
  EXPECT_FALSE(render_status_record("#status done=x running=1 queued=1 elapsed=1"));  // not a number
  EXPECT_FALSE(render_status_record("#status done running=1 queued=1 elapsed=1"));    // no '='
}

TEST(StatusDisplay, TerminalRedrawsInPlaceWithLinesAbove) {
  std::ostringstream out;
  status_display display(out, /*tty=*/true, std::chrono::milliseconds{10000});
  display.status("done 1/3");
  display.status("done 2/3");  // a terminal shows every status, however soon
  display.line("ok   a");
  display.finish();
  EXPECT_EQ(out.str(), "\rdone 1/3\x1b[K\rdone 2/3\x1b[K\r\x1b[Kok   a\n\rdone 2/3\x1b[K\n");
}

TEST(StatusDisplay, PlainStreamThrottlesAndPrintsTheLastStatusAtTheEnd) {
  std::ostringstream out;
  status_display display(out, /*tty=*/false, std::chrono::milliseconds{60000});
  display.status("done 0/3");
  display.status("done 1/3");  // held back: within the interval
  display.line("ok   a");
  display.status("done 3/3");
  display.finish();
  EXPECT_EQ(out.str(), "done 0/3\nok   a\ndone 3/3\n");
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
}

}  // namespace
}  // namespace cuda_agent::cli
