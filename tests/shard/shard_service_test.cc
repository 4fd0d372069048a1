// The shard process answers grpc.health.v1 and server reflection, and shuts
// down cleanly on SIGTERM. Both services are called through the generic stub
// (no generated code for them is needed), with hand-encoded protobuf bytes.
#include <signal.h>
#include <sys/wait.h>

#include <memory>
#include <string>

#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/shard/shard_testing.h"

namespace gradstream::testing {
namespace {

std::string ToString(const grpc::ByteBuffer& buf) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buf.Dump(&slices).ok()) return out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

grpc::ByteBuffer FromString(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

void* Tag(intptr_t i) { return reinterpret_cast<void*>(i); }

bool Await(grpc::CompletionQueue& cq, intptr_t want) {
  void* tag = nullptr;
  bool ok = false;
  const auto deadline = absl::ToChronoTime(absl::Now() + absl::Seconds(20));
  if (cq.AsyncNext(&tag, &ok, deadline) != grpc::CompletionQueue::GOT_EVENT) return false;
  return ok && tag == Tag(want);
}

TEST(ShardService, HealthReportsServing) {
  auto shard = ShardProcess::Start({});
  ASSERT_TRUE(shard.ok()) << shard.status();
  grpc::GenericStub stub((*shard)->Connect());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  grpc::CompletionQueue cq;
  // HealthCheckRequest{service: ""} encodes to zero bytes.
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", FromString(""), &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, Tag(1));
  ASSERT_TRUE(Await(cq, 1));
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(ToString(response), std::string("\x08\x01", 2));  // status: SERVING
}

TEST(ShardService, ReflectionListsTheParameterServer) {
  auto shard = ShardProcess::Start({});
  ASSERT_TRUE(shard.ok()) << shard.status();
  grpc::GenericStub stub((*shard)->Connect());
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  grpc::CompletionQueue cq;
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(Tag(1));
  ASSERT_TRUE(Await(cq, 1));
  call->Write(FromString(std::string("\x3a\x00", 2)), Tag(2));  // list_services: ""
  ASSERT_TRUE(Await(cq, 2));
  grpc::ByteBuffer response;
  call->Read(&response, Tag(3));
  ASSERT_TRUE(Await(cq, 3));
  EXPECT_NE(ToString(response).find("gradstream.v1.ParameterServer"), std::string::npos);
  call->WritesDone(Tag(4));
  ASSERT_TRUE(Await(cq, 4));
  grpc::Status status;
  call->Finish(&status, Tag(5));
  ASSERT_TRUE(Await(cq, 5));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST(ShardService, SigtermShutsDownCleanly) {
  auto shard = ShardProcess::Start({});
  ASSERT_TRUE(shard.ok()) << shard.status();
  // A session with a parked pull must not keep the process alive.
  pb::CreateJobRequest req;
  req.set_job_id("j");
  req.add_chunks()->set_num_elems(4);
  req.mutable_membership()->add_worker_ids(1);
  pb::CreateJobResponse resp;
  auto stub = (*shard)->Stub();
  ASSERT_TRUE(Call(stub.get(), &pb::ParameterServer::Stub::CreateJob, req, &resp).ok());
  SessionClient s((*shard)->Connect());
  ASSERT_TRUE(s.Hello("j", 1).ok());
  ASSERT_TRUE(s.SendPull(1, 5));
  // Messages of a stream are handled in order: once this push is acked, the
  // pull is parked.
  ASSERT_EQ(s.Push(2, 99, 0, RawChunk({1}))->code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  const int wstatus = (*shard)->Kill(SIGTERM);  // waits for the exit
  auto answer = s.AwaitPull(1);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->back().code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  EXPECT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
}

}  // namespace
}  // namespace gradstream::testing
