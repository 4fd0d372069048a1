// BufferPool: best fit, the byte bound, the small-buffer threshold, and use
// from many threads.
#include "common/buffer_pool.h"

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace gradstream {
namespace {

TEST(BufferPool, HandsBackTheSmallestBufferThatFits) {
  BufferPool pool(10 << 20);
  std::string big(1 << 20, 'x'), small(64 << 10, 'y');
  const size_t big_cap = big.capacity(), small_cap = small.capacity();
  pool.Give(std::move(big));
  pool.Give(std::move(small));
  std::string a = pool.Take(32 << 10);
  EXPECT_EQ(a.capacity(), small_cap);
  EXPECT_TRUE(a.empty());
  std::string b = pool.Take(512 << 10);
  EXPECT_EQ(b.capacity(), big_cap);
  EXPECT_EQ(pool.Take(1).capacity(), std::string().capacity());  // empty pool: a new string
}

TEST(BufferPool, KeepsWithinItsBudget) {
  BufferPool pool(1 << 20);
  pool.Give(std::string(700 << 10, 'x'));
  pool.Give(std::string(700 << 10, 'x'));  // over budget: dropped
  EXPECT_LE(pool.pooled_bytes(), size_t{1} << 20);
  BufferPool off(0);
  off.Give(std::string(1 << 20, 'x'));
  EXPECT_EQ(off.pooled_bytes(), 0u);
}

TEST(BufferPool, KeepsWithinItsCapacityAndDropsSmallBuffers) {
  BufferPool pool(10000);
  std::string a, b, small;
  a.reserve(6000);
  b.reserve(6000);
  small.reserve(100);
  pool.Give(std::move(a));
  pool.Give(std::move(b));      // would pass 10000: dropped
  pool.Give(std::move(small));  // too small to keep
  EXPECT_GE(pool.pooled_bytes(), 6000u);
  EXPECT_LE(pool.pooled_bytes(), 10000u);
  EXPECT_GE(pool.Take(5000).capacity(), 5000u);
  EXPECT_EQ(pool.pooled_bytes(), 0u);
  // None pooled: a new, empty string with nothing reserved (callers reserve).
  const std::string fresh = pool.Take(7000);
  EXPECT_TRUE(fresh.empty());
  EXPECT_EQ(fresh.capacity(), std::string().capacity());
}

TEST(BufferPool, DropsABufferLargerThanTheBound) {
  BufferPool pool(size_t{1} << 20);
  pool.Give(std::string((size_t{1} << 20) + 1, 'x'));
  EXPECT_EQ(pool.pooled_bytes(), 0u);
  std::string edge;
  edge.reserve(BufferPool::kMinPooledBytes);
  const size_t edge_cap = edge.capacity();
  pool.Give(std::move(edge));  // at the threshold: kept
  EXPECT_EQ(pool.pooled_bytes(), edge_cap);
}

TEST(BufferPool, TakenBuffersAreEmptyAndKeepTheirMemory) {
  BufferPool pool(size_t{1} << 20);
  std::string buffer(100000, 'z');
  const char* const data = buffer.data();
  pool.Give(std::move(buffer));
  std::string again = pool.Take(50000);
  EXPECT_TRUE(again.empty());
  EXPECT_EQ(again.data(), data);  // the same memory, not a copy
  EXPECT_EQ(pool.Take(1).capacity(), std::string().capacity());
}

TEST(BufferPool, ManyThreadsStayWithinTheBound) {
  constexpr size_t kMax = size_t{256} << 10;
  BufferPool pool(kMax);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 2000; ++i) {
        const size_t bytes = 4096 + static_cast<size_t>((i * 7919 + t * 104729) % 60000);
        std::string s = pool.Take(bytes);
        EXPECT_TRUE(s.empty());
        s.resize(bytes, static_cast<char>(t));
        pool.Give(std::move(s));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_GT(pool.pooled_bytes(), 0u);
  EXPECT_LE(pool.pooled_bytes(), kMax);
}

}  // namespace
}  // namespace gradstream
