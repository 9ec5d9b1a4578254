// The host's bootstrap channels (host/src/parallel/bootstrap_channels.hpp): the in-process, TCP and
// shared-file broadcasts that reducers use to start. Four threads play four ranks:
//   Bootstrap.*BroadcastsFromEveryRoot  rounds from each root, 1 MiB, 16-byte and empty payloads,
//       the last round through the C view (tycho_bootstrap) a reducer receives;
//   Bootstrap.*TimeoutNamesMissingRank  one rank never comes: the others fail within the 1 s
//       timeout (plus slack), the message naming the rank that is missing;
//   Bootstrap.FileLeavesNoFiles, FileMissingRootTimesOut, ThreadSizeMismatchFails,
//   CViewSetsLastError.
#include <gtest/gtest.h>

#include <tycho/core/error.hpp>
#include <tycho/core/last_error.hpp>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../host/src/parallel/bootstrap_channels.hpp"

namespace fs = std::filesystem;
using tycho::host::bootstrap_channel;
using tycho::host::file_channel;
using tycho::host::tcp_channel;
using tycho::host::thread_channel;

namespace {

constexpr int32_t k_world = 4;
constexpr double k_timeout_s = 1.0;
constexpr double k_slack_s = 2.0;  // scheduling slack on a busy machine

using clock_type = std::chrono::steady_clock;

// Runs body(rank) on one thread per rank; returns each rank's error message ("" = none).
std::vector<std::string> run_ranks(int32_t world, const std::function<void(int32_t)>& body) {
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const std::exception& e) {
        errors[size_t(r)] = e.what();
        if (errors[size_t(r)].empty()) errors[size_t(r)] = "(empty message)";
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::vector<unsigned char> payload(size_t bytes, uint32_t seed) {
  std::vector<unsigned char> v(bytes);
  std::mt19937 rng(seed);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

struct round_spec {
  int32_t root;
  size_t bytes;
};
const std::vector<round_spec> k_rounds = {{0, 1 << 20}, {1, 16}, {2, 1 << 20}, {3, 16},
                                          {2, 0},       {3, 1 << 20}, {0, 16}, {1, 1 << 20}};

// Every round of k_rounds on `ch`; the last one through the C view.
void broadcast_rounds(bootstrap_channel& ch) {
  const int32_t rank = ch.rank();
  for (size_t k = 0; k < k_rounds.size(); ++k) {
    const auto [root, bytes] = k_rounds[k];
    const auto expected = payload(bytes, uint32_t(1000 * k + size_t(root)));
    std::vector<unsigned char> buf = rank == root ? expected : std::vector<unsigned char>(bytes, 0xAB);
    if (k + 1 < k_rounds.size()) {
      ch.broadcast(buf.data(), bytes, root);
    } else {
      const tycho_bootstrap b = ch.bootstrap();
      const tycho_status s = b.broadcast(b.context, buf.data(), bytes, root);
      if (s != TYCHO_OK) tycho::fail(s, "C view: ", tycho::last_error());
    }
    if (buf != expected) tycho::fail(TYCHO_ERR_INTERNAL, "rank ", rank, ": round ", k, " (root ", root,
                                     ", ", bytes, " bytes) received other bytes");
  }
}

void expect_all_ok(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// A folder of its own under the temporary folder, removed at the end.
struct temp_folder {
  fs::path path;
  explicit temp_folder(const std::string& name) {
    path = fs::temp_directory_path() / ("tycho_bootstrap_" + name + "_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_folder() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path)) names.push_back(e.path().filename().string());
    return names;
  }
};

}  // namespace

// ------------------------------------------------------------------ in-process

TEST(Bootstrap, ThreadBroadcastsFromEveryRoot) {
  auto channel = tycho::host::make_thread_channel(k_world, 10.0);
  expect_all_ok(run_ranks(k_world, [&](int32_t r) {
    auto& ch = channel->endpoint(r);
    ASSERT_EQ(ch.rank(), r);
    ASSERT_EQ(ch.world_size(), k_world);
    broadcast_rounds(ch);
  }));
}

TEST(Bootstrap, ThreadTimeoutNamesMissingRank) {
  auto channel = tycho::host::make_thread_channel(k_world, k_timeout_s);
  const auto t0 = clock_type::now();
  auto errors = run_ranks(k_world - 1, [&](int32_t r) {  // rank 3 never comes
    std::vector<unsigned char> buf(64);
    channel->endpoint(r).broadcast(buf.data(), buf.size(), 0);
  });
  const double elapsed = seconds_since(t0);
  EXPECT_LT(elapsed, k_timeout_s + k_slack_s);
  for (int32_t r = 0; r < k_world - 1; ++r) {
    EXPECT_NE(errors[size_t(r)].find("rank 3 has not arrived"), std::string::npos)
        << "rank " << r << ": " << errors[size_t(r)];
  }
  // The channel is broken from now on: a later call fails at once.
  std::vector<unsigned char> buf(8);
  EXPECT_THROW(channel->endpoint(0).broadcast(buf.data(), buf.size(), 0), tycho::error);
}

TEST(Bootstrap, ThreadSizeMismatchFails) {
  auto channel = tycho::host::make_thread_channel(2, 5.0);
  auto errors = run_ranks(2, [&](int32_t r) {
    std::vector<unsigned char> buf(r == 0 ? 8 : 16);
    channel->endpoint(r).broadcast(buf.data(), buf.size(), 0);
  });
  // Whichever rank came second saw the mismatch; the other fails because the channel broke.
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[size_t(r)].find("bytes from root 0 but rank"), std::string::npos)
        << "rank " << r << ": " << errors[size_t(r)];
  }
}

TEST(Bootstrap, CViewSetsLastError) {
  auto channel = tycho::host::make_thread_channel(2, 0.2);
  const tycho_bootstrap b = channel->bootstrap(0);
  int value = 7;
  const tycho_status s = b.broadcast(b.context, &value, sizeof value, 0);  // rank 1 never comes
  EXPECT_EQ(s, TYCHO_ERR_IO);
  EXPECT_NE(std::string(tycho::last_error()).find("rank 1 has not arrived"), std::string::npos)
      << tycho::last_error();
  EXPECT_EQ(b.broadcast(b.context, &value, sizeof value, 5), TYCHO_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(tycho::last_error()).find("root 5"), std::string::npos) << tycho::last_error();
}

// ------------------------------------------------------------------ tcp

TEST(Bootstrap, TcpBroadcastsFromEveryRoot) {
  // Rank 0 binds port 0 (any free port) in its constructor; the others use the port it got.
  auto rank0 = std::make_unique<tcp_channel>(0, k_world, "127.0.0.1", 0, 10.0);
  const int port = rank0->port();
  ASSERT_GT(port, 0);
  expect_all_ok(run_ranks(k_world, [&](int32_t r) {
    std::unique_ptr<tcp_channel> own;
    if (r != 0) own = std::make_unique<tcp_channel>(r, k_world, "127.0.0.1", port, 10.0);
    tcp_channel& ch = r == 0 ? *rank0 : *own;
    broadcast_rounds(ch);
  }));
}

TEST(Bootstrap, TcpTimeoutNamesMissingRank) {
  auto rank0 = std::make_unique<tcp_channel>(0, k_world, "127.0.0.1", 0, k_timeout_s);
  const int port = rank0->port();
  const auto t0 = clock_type::now();
  auto errors = run_ranks(k_world - 1, [&](int32_t r) {  // rank 3 never comes
    std::unique_ptr<tcp_channel> own;
    if (r != 0) own = std::make_unique<tcp_channel>(r, k_world, "127.0.0.1", port, k_timeout_s);
    tcp_channel& ch = r == 0 ? *rank0 : *own;
    std::vector<unsigned char> buf(64);
    ch.broadcast(buf.data(), buf.size(), 0);
  });
  EXPECT_LT(seconds_since(t0), k_timeout_s + k_slack_s);
  EXPECT_NE(errors[0].find("waiting for rank 3 to connect"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("127.0.0.1:" + std::to_string(port)), std::string::npos) << errors[0];
  for (int32_t r = 1; r < k_world - 1; ++r) EXPECT_NE(errors[size_t(r)], "") << "rank " << r;
}

TEST(Bootstrap, TcpNobodyListeningTimesOut) {
  // A port nobody listens on: bind one, keep it bound without listening.
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const int port = ntohs(a.sin_port);
  tcp_channel ch(2, k_world, "127.0.0.1", port, 0.5);
  const auto t0 = clock_type::now();
  int value = 0;
  try {
    ch.broadcast(&value, sizeof value, 0);
    ADD_FAILURE() << "no error";
  } catch (const tycho::error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2: could not connect to rank 0 at 127.0.0.1:" +
                                         std::to_string(port)),
              std::string::npos)
        << e.what();
  }
  EXPECT_LT(seconds_since(t0), 0.5 + k_slack_s);
  ::close(s);
}

// ------------------------------------------------------------------ shared file

TEST(Bootstrap, FileBroadcastsFromEveryRootAndLeavesNoFiles) {
  temp_folder dir("ok");
  const std::string path = (dir.path / "rendezvous").string();
  expect_all_ok(run_ranks(k_world, [&](int32_t r) {
    file_channel ch(r, k_world, path, 10.0);
    broadcast_rounds(ch);
  }));
  EXPECT_TRUE(dir.entries().empty()) << "left: " << dir.entries().size() << " files, e.g. "
                                     << (dir.entries().empty() ? "" : dir.entries()[0]);
}

TEST(Bootstrap, FileTimeoutNamesMissingRank) {
  temp_folder dir("late");
  const std::string path = (dir.path / "rendezvous").string();
  const auto t0 = clock_type::now();
  auto errors = run_ranks(k_world - 1, [&](int32_t r) {  // rank 3 never comes
    file_channel ch(r, k_world, path, k_timeout_s);
    std::vector<unsigned char> buf(64);
    ch.broadcast(buf.data(), buf.size(), 0);
  });
  EXPECT_LT(seconds_since(t0), k_timeout_s + k_slack_s);
  EXPECT_NE(errors[0].find("rank 3 has not read"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find(path + ".0"), std::string::npos) << errors[0];
  EXPECT_EQ(errors[1], "");  // they had the bytes; only the root waits for everyone
  EXPECT_EQ(errors[2], "");
}

TEST(Bootstrap, FileMissingRootTimesOut) {
  temp_folder dir("noroot");
  const std::string path = (dir.path / "rendezvous").string();
  const auto t0 = clock_type::now();
  auto errors = run_ranks(k_world - 1, [&](int32_t r) {  // the root, rank 3, never comes
    file_channel ch(r, k_world, path, k_timeout_s);
    std::vector<unsigned char> buf(64);
    ch.broadcast(buf.data(), buf.size(), 3);
  });
  EXPECT_LT(seconds_since(t0), k_timeout_s + k_slack_s);
  for (int32_t r = 0; r < k_world - 1; ++r)
    EXPECT_NE(errors[size_t(r)].find("rank 3 (the root) has not written"), std::string::npos)
        << "rank " << r << ": " << errors[size_t(r)];
}

TEST(Bootstrap, FileRefusesMissingFolder) {
  EXPECT_THROW(file_channel(0, 2, "/nonexistent-tycho-folder/rendezvous", 1.0), tycho::error);
}
