// The Session stream's phases: forward only, network events never crash.
#include "server/shard/rpc/internal/session_lifecycle.h"

#include "gtest/gtest.h"

namespace gradstream::shard::internal {
namespace {

constexpr SessionPhase kAll[] = {SessionPhase::kOpen,    SessionPhase::kHalfClosed,
                                 SessionPhase::kClosing, SessionPhase::kAborted,
                                 SessionPhase::kFinished, SessionPhase::kDone};

TEST(SessionLifecycle, HalfCloseThenFinishThenDone) {
  SessionPhase p = SessionPhase::kOpen;
  p = NextPhase(p, SessionEvent::kPeerHalfClosed);
  EXPECT_EQ(p, SessionPhase::kHalfClosed);
  p = NextPhase(p, SessionEvent::kFinish);
  EXPECT_EQ(p, SessionPhase::kFinished);
  p = NextPhase(p, SessionEvent::kDone);
  EXPECT_EQ(p, SessionPhase::kDone);
}

TEST(SessionLifecycle, AStreamErrorClosesAndACancelAbortsIt) {
  SessionPhase p = NextPhase(SessionPhase::kOpen, SessionEvent::kStreamError);
  EXPECT_EQ(p, SessionPhase::kClosing);
  EXPECT_EQ(NextPhase(p, SessionEvent::kPeerHalfClosed), SessionPhase::kClosing);
  EXPECT_EQ(NextPhase(p, SessionEvent::kCancelled), SessionPhase::kAborted);
  EXPECT_EQ(NextPhase(SessionPhase::kHalfClosed, SessionEvent::kWriteFailed),
            SessionPhase::kAborted);
}

TEST(SessionLifecycle, NetworkEventsNeverMoveAStreamBack) {
  for (SessionPhase p : kAll) {
    for (SessionEvent e : {SessionEvent::kPeerHalfClosed, SessionEvent::kStreamError,
                           SessionEvent::kCancelled, SessionEvent::kWriteFailed}) {
      EXPECT_GE(NextPhase(p, e), p) << PhaseName(p);
    }
  }
  EXPECT_EQ(NextPhase(SessionPhase::kFinished, SessionEvent::kCancelled), SessionPhase::kFinished);
  EXPECT_EQ(NextPhase(SessionPhase::kAborted, SessionEvent::kStreamError), SessionPhase::kAborted);
}

TEST(SessionLifecycle, FinishIsLegalOnceFromAnyUnfinishedPhase) {
  for (SessionPhase p : kAll) {
    if (p < SessionPhase::kFinished) {
      EXPECT_EQ(NextPhase(p, SessionEvent::kFinish), SessionPhase::kFinished);
    }
  }
}

TEST(SessionLifecycleDeathTest, FinishingTwiceOrDoneBeforeFinishIsAProgrammerError) {
  EXPECT_DEATH(NextPhase(SessionPhase::kFinished, SessionEvent::kFinish), "Finish");
  EXPECT_DEATH(NextPhase(SessionPhase::kOpen, SessionEvent::kDone), "OnDone");
}

}  // namespace
}  // namespace gradstream::shard::internal
