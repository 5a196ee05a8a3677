#include "bench/serve/load_stats.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace llmrt::bench {
namespace {

TEST(ArrivalTimes, FixedRateIsEvenlySpaced) {
  const std::vector<double> times = ArrivalTimes(4, 2.0, /*poisson=*/false, 1);
  EXPECT_THAT(times, ::testing::ElementsAre(0.0, 0.5, 1.0, 1.5));
  EXPECT_THAT(ArrivalTimes(3, 0.0, true, 1), ::testing::ElementsAre(0.0, 0.0, 0.0));
}

TEST(ArrivalTimes, PoissonHasTheRequestedMeanGap) {
  // 20000 exponential gaps of mean 0.1 s: the sample mean is within 3% with overwhelming
  // probability (standard error 0.7%).
  const std::vector<double> times = ArrivalTimes(20001, 10.0, /*poisson=*/true, 7);
  EXPECT_NEAR(times.back() / 20000.0, 0.1, 0.003);
  EXPECT_TRUE(std::is_sorted(times.begin(), times.end()));
  EXPECT_EQ(times, ArrivalTimes(20001, 10.0, true, 7));  // seeded
}

TEST(RandomShapes, StaysInsideTheRange) {
  for (const RequestShape& shape : RandomShapes(1000, 100, 10, 0.5, 3)) {
    EXPECT_GE(shape.input_tokens, 50);
    EXPECT_LE(shape.input_tokens, 150);
    EXPECT_GE(shape.output_tokens, 5);
    EXPECT_LE(shape.output_tokens, 15);
  }
  for (const RequestShape& shape : RandomShapes(10, 32, 8, 0.0, 3)) {
    EXPECT_EQ(shape.input_tokens, 32);
    EXPECT_EQ(shape.output_tokens, 8);
  }
}

TEST(ShapesFromFile, CyclesAndRejectsBadLines) {
  const std::string path = ::testing::TempDir() + "/shapes.txt";
  std::ofstream(path) << "# input output\n10 2\n\n30 4  # long\n";
  absl::StatusOr<std::vector<RequestShape>> shapes = ShapesFromFile(path, 3);
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  ASSERT_EQ(shapes->size(), 3u);
  EXPECT_EQ((*shapes)[1].input_tokens, 30);
  EXPECT_EQ((*shapes)[2].output_tokens, 2);
  std::ofstream(path) << "10\n";
  EXPECT_THAT(std::string(ShapesFromFile(path, 1).status().message()),
              ::testing::HasSubstr("shapes.txt:1"));
}

TEST(SseParser, SplitsEventsAcrossChunks) {
  SseParser parser;
  std::vector<std::string> events;
  parser.Feed("data: {\"a\"", events);
  EXPECT_TRUE(events.empty());
  parser.Feed(":1}\n\n: comment\n\ndata: [DO", events);
  parser.Feed("NE]\r\n\r\n", events);
  EXPECT_THAT(events, ::testing::ElementsAre("{\"a\":1}", "[DONE]"));
}

TEST(Summarize, MatchesNumpyPercentiles) {
  // numpy.percentile([1, 2, 3, 4, 10], [50, 99]) = [3.0, 9.76].
  const Summary summary = Summarize({10, 1, 3, 2, 4});
  EXPECT_DOUBLE_EQ(summary.mean, 4.0);
  EXPECT_DOUBLE_EQ(summary.p50, 3.0);
  EXPECT_NEAR(summary.p99, 9.76, 1e-12);
  EXPECT_TRUE(std::isnan(Summarize({}).mean));
}

}  // namespace
}  // namespace llmrt::bench
