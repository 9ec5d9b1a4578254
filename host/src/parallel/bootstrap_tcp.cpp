// The TCP bootstrap channel: rank 0 listens on MASTER_ADDR:MASTER_PORT and is the hub (see
// bootstrap_channels.hpp). Every socket is non-blocking and every wait is a poll() bounded by the
// deadline of the current call.
//
// Wire format: a 24-byte header, big-endian: magic "TYCB", kind, round, rank or root, value;
// a DATA header is followed by `value` payload bytes.
//   HELLO (rank r → 0, once):   who = r, value = world size
//   DATA  (root → 0, 0 → r):    round, who = root, value = bytes; then the bytes
//   ACK   (r → 0):              round, who = r
//   DONE  (0 → r):              round
#include <tycho/core/error.hpp>

#include <arpa/inet.h>
#include <endian.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "parallel/bootstrap_channels.hpp"
#include "tycho/host/log.hpp"

namespace tycho::host {
namespace {

using clock = std::chrono::steady_clock;

constexpr uint32_t k_magic = 0x54594342;  // "TYCB"
enum message_kind : uint32_t { k_hello = 1, k_data = 2, k_ack = 3, k_done = 4 };
constexpr size_t k_header_bytes = 24;

struct header {
  uint32_t kind = 0;
  uint32_t round = 0;
  int32_t who = 0;
  uint64_t value = 0;
};

const char* message_name(uint32_t k) {
  switch (k) {
    case k_hello: return "HELLO";
    case k_data: return "DATA";
    case k_ack: return "ACK";
    case k_done: return "DONE";
    default: return "unknown";
  }
}

void encode(const header& h, unsigned char* out) {
  const uint32_t w[4] = {htobe32(k_magic), htobe32(h.kind), htobe32(h.round),
                         htobe32(static_cast<uint32_t>(h.who))};
  const uint64_t v = htobe64(h.value);
  std::memcpy(out, w, 16);
  std::memcpy(out + 16, &v, 8);
}

// false when the magic is wrong (not one of ours).
bool decode(const unsigned char* in, header& h) {
  uint32_t w[4];
  uint64_t v;
  std::memcpy(w, in, 16);
  std::memcpy(&v, in + 16, 8);
  if (be32toh(w[0]) != k_magic) return false;
  h.kind = be32toh(w[1]);
  h.round = be32toh(w[2]);
  h.who = static_cast<int32_t>(be32toh(w[3]));
  h.value = be64toh(v);
  return true;
}

clock::time_point deadline_after(double seconds) {
  return clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
}

int remaining_ms(clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
  return left <= 0 ? 0 : int(std::min<long long>(left, 1 << 30));
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_fd(int fd, short events, clock::time_point deadline, const std::string& doing) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int ms = remaining_ms(deadline);
    const int n = ::poll(&p, 1, ms);
    if (n > 0) return true;  // ready, or an error/hang-up the next call reports
    if (n == 0) {
      if (clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) fail(TYCHO_ERR_IO, doing, ": poll: ", std::strerror(errno));
  }
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

std::string rank_list(const std::vector<int32_t>& ranks) {
  std::string s = ranks.size() > 1 ? "ranks " : "rank ";
  for (size_t i = 0; i < ranks.size(); ++i) s += cat(i ? ", " : "", ranks[i]);
  return s;
}

}  // namespace

// ---------------------------------------------------------------- byte streams

namespace {

// `doing` names the channel, the round and the peer; `timeout_s` is for the message.
void send_all(int fd, const void* data, size_t n, clock::time_point deadline, double timeout_s,
              const std::string& doing) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= size_t(k);
      continue;
    }
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_fd(fd, POLLOUT, deadline, doing))
        fail(TYCHO_ERR_IO, doing, ": timed out after ", timeout_s, " s");
      continue;
    }
    fail(TYCHO_ERR_IO, doing, ": ", k < 0 ? std::strerror(errno) : "send returned 0",
         errno == EPIPE || errno == ECONNRESET ? " (the peer closed the connection: it failed or ended)" : "");
  }
}

void recv_all(int fd, void* data, size_t n, clock::time_point deadline, double timeout_s,
              const std::string& doing) {
  auto* p = static_cast<unsigned char*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k > 0) {
      p += k;
      n -= size_t(k);
      continue;
    }
    if (k == 0) fail(TYCHO_ERR_IO, doing, ": the peer closed the connection (it failed or ended)");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_fd(fd, POLLIN, deadline, doing))
        fail(TYCHO_ERR_IO, doing, ": timed out after ", timeout_s, " s");
      continue;
    }
    fail(TYCHO_ERR_IO, doing, ": ", std::strerror(errno));
  }
}

void send_header(int fd, const header& h, clock::time_point deadline, double timeout_s,
                 const std::string& doing) {
  unsigned char buf[k_header_bytes];
  encode(h, buf);
  send_all(fd, buf, sizeof buf, deadline, timeout_s, doing);
}

header recv_header(int fd, uint32_t expect_kind, clock::time_point deadline, double timeout_s,
                   const std::string& doing) {
  unsigned char buf[k_header_bytes];
  recv_all(fd, buf, sizeof buf, deadline, timeout_s, doing);
  header h;
  if (!decode(buf, h)) fail(TYCHO_ERR_IO, doing, ": the peer does not speak tycho's bootstrap protocol");
  if (h.kind != expect_kind)
    fail(TYCHO_ERR_IO, doing, ": expected ", message_name(expect_kind), ", got ", message_name(h.kind),
         " (the ranks are out of step)");
  return h;
}

}  // namespace

// ---------------------------------------------------------------- the channel

tcp_channel::tcp_channel(int32_t rank, int32_t world_size, std::string master_addr,
                         int master_port, double timeout_s)
    : rank_(rank), world_size_(world_size), addr_(std::move(master_addr)), port_(master_port),
      timeout_s_(timeout_s) {
  if (world_size < 1) fail(TYCHO_ERR_INVALID_ARGUMENT, "tcp bootstrap: world size must be >= 1, got ", world_size);
  if (rank < 0 || rank >= world_size)
    fail(TYCHO_ERR_INVALID_ARGUMENT, "tcp bootstrap: rank ", rank, " is not in [0, ", world_size, ")");
  if (addr_.empty()) fail(TYCHO_ERR_INVALID_ARGUMENT, "tcp bootstrap, rank ", rank, ": no address (MASTER_ADDR) given");
  if (master_port < 0 || master_port > 65535 || (master_port == 0 && rank != 0))
    fail(TYCHO_ERR_INVALID_ARGUMENT, "tcp bootstrap, rank ", rank, ": port (MASTER_PORT) must be in [1, 65535], got ", master_port);
  if (!(timeout_s > 0) || !std::isfinite(timeout_s))
    fail(TYCHO_ERR_INVALID_ARGUMENT, where(), ": the timeout must be > 0 s, got ", timeout_s);
  if (rank != 0 || world_size == 1) return;

  // Rank 0 listens on every interface of MASTER_ADDR's address family.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int e = ::getaddrinfo(addr_.c_str(), nullptr, &hints, &found); e != 0)
    fail(TYCHO_ERR_IO, where(), ": cannot resolve the address '", addr_, "': ", ::gai_strerror(e));
  const int family = found->ai_family == AF_INET6 ? AF_INET6 : AF_INET;
  ::freeaddrinfo(found);

  listen_fd_ = ::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) fail(TYCHO_ERR_IO, where(), ": socket: ", std::strerror(errno));
  int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (family == AF_INET6) {
    int zero = 0;
    ::setsockopt(listen_fd_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_any;
    a.sin6_port = htons(uint16_t(port_));
    rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(uint16_t(port_));
    rc = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0 || ::listen(listen_fd_, std::max(world_size, 16)) != 0) {
    const int e = errno;
    close_all();
    fail(TYCHO_ERR_IO, where(), ": cannot listen on port ", port_, ": ", std::strerror(e));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0)
    port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

tcp_channel::~tcp_channel() { close_all(); }

std::string tcp_channel::where() const {
  return cat("tcp bootstrap ", addr_, ":", port_, ", rank ", rank_);
}

void tcp_channel::close_all() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
  for (int& fd : peers_)
    if (fd >= 0) {
      ::close(fd);
      fd = -1;
    }
}

void tcp_channel::fail_and_close(const std::string& message) {
  broken_ = message;
  close_all();
  fail(TYCHO_ERR_IO, message);
}

void tcp_channel::connect() { connect_until(deadline_after(timeout_s_)); }

void tcp_channel::connect_until(std::chrono::steady_clock::time_point deadline) {
  if (connected_) return;
  if (!broken_.empty()) fail(TYCHO_ERR_IO, where(), ": the channel failed earlier: ", broken_);
  if (world_size_ == 1) {
    connected_ = true;
    return;
  }
  try {
    if (rank_ == 0) {
      if (listen_fd_ < 0) fail(TYCHO_ERR_IO, where(), ": not listening");
      peers_.assign(size_t(world_size_), -1);
      int32_t joined = 0;
      while (joined < world_size_ - 1) {
        if (!wait_fd(listen_fd_, POLLIN, deadline, where())) {
          std::vector<int32_t> missing;
          for (int32_t r = 1; r < world_size_; ++r)
            if (peers_[size_t(r)] < 0) missing.push_back(r);
          fail(TYCHO_ERR_IO, where(), ": timed out after ", timeout_s_, " s waiting for ",
               rank_list(missing), " to connect");
        }
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
          fail(TYCHO_ERR_IO, where(), ": accept: ", std::strerror(errno));
        }
        set_nodelay(fd);
        unsigned char buf[k_header_bytes];
        header h;
        try {
          recv_all(fd, buf, sizeof buf, deadline, timeout_s_, cat(where(), ": reading a HELLO"));
        } catch (const error& e) {
          ::close(fd);
          log_warning("bootstrap", cat(e.what(), " (connection ignored)"));
          continue;
        }
        if (!decode(buf, h) || h.kind != k_hello) {
          ::close(fd);
          log_warning("bootstrap", cat(where(), ": a connection that is not a tycho rank (ignored)"));
          continue;
        }
        const int32_t r = h.who;
        if (r < 1 || r >= world_size_ || h.value != uint64_t(world_size_) || peers_[size_t(r)] >= 0) {
          ::close(fd);
          fail(TYCHO_ERR_IO, where(), ": a process says it is rank ", r, " of ", h.value,
               r >= 1 && r < world_size_ && peers_[size_t(r)] >= 0
                   ? " but that rank has connected already"
                   : cat(", this run has ranks 0..", world_size_ - 1, " (world size ", world_size_, ")"));
        }
        peers_[size_t(r)] = fd;
        ++joined;
      }
      ::close(listen_fd_);  // everyone is here: free the port
      listen_fd_ = -1;
    } else {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      const std::string port = std::to_string(port_);
      std::string last = "no attempt";
      int fd = -1;
      auto pause = std::chrono::milliseconds(10);
      while (fd < 0) {
        addrinfo* found = nullptr;
        if (int e = ::getaddrinfo(addr_.c_str(), port.c_str(), &hints, &found); e != 0) {
          last = cat("cannot resolve '", addr_, "': ", ::gai_strerror(e));
        } else {
          for (addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
            int s = ::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (s < 0) {
              last = std::strerror(errno);
              continue;
            }
            int rc = ::connect(s, ai->ai_addr, ai->ai_addrlen);
            if (rc != 0 && errno == EINPROGRESS) {
              if (wait_fd(s, POLLOUT, deadline, where())) {
                int err = 0;
                socklen_t len = sizeof err;
                ::getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
                rc = err == 0 ? 0 : -1;
                errno = err;
              } else {
                errno = ETIMEDOUT;
              }
            }
            if (rc == 0) {
              fd = s;
            } else {
              last = std::strerror(errno);
              ::close(s);
            }
          }
          ::freeaddrinfo(found);
        }
        if (fd >= 0) break;
        const auto now = clock::now();
        if (now >= deadline)
          fail(TYCHO_ERR_IO, where(), ": could not connect to rank 0 at ", addr_, ":", port_,
               " within ", timeout_s_, " s (last error: ", last, ")");
        std::this_thread::sleep_for(std::min<clock::duration>(pause, deadline - now));
        pause = std::min(pause * 2, std::chrono::milliseconds(200));
      }
      set_nodelay(fd);
      peers_.assign(1, fd);
      send_header(fd, header{k_hello, 0, rank_, uint64_t(world_size_)}, deadline, timeout_s_,
                  cat(where(), ": sending HELLO to rank 0"));
    }
  } catch (const error& e) {
    fail_and_close(e.what());
  }
  connected_ = true;
}

void tcp_channel::broadcast(void* data, size_t bytes, int32_t root) {
  if (root < 0 || root >= world_size_)
    fail(TYCHO_ERR_INVALID_ARGUMENT, where(), ": root ", root, " is not in [0, ", world_size_, ")");
  if (data == nullptr && bytes > 0)
    fail(TYCHO_ERR_INVALID_ARGUMENT, where(), ": no buffer for ", bytes, " bytes");
  if (!broken_.empty()) fail(TYCHO_ERR_IO, where(), ": the channel failed earlier: ", broken_);
  const auto deadline = deadline_after(timeout_s_);  // the rendezvous, if not made yet, included
  connect_until(deadline);
  const uint32_t round = round_++;
  if (world_size_ == 1) return;
  const std::string at = cat(where(), ": broadcast round ", round, " (root ", root, ", ", bytes, " bytes)");
  auto check_data = [&](const header& h, int32_t from) {
    if (h.round != round || h.who != root || h.value != bytes)
      fail(TYCHO_ERR_IO, at, ": rank ", from, " sent round ", h.round, " from root ", h.who, " with ",
           h.value, " bytes (every rank must broadcast the same size from the same root, in the same order)");
  };
  try {
    if (rank_ == 0) {
      if (root != 0) {
        const int fd = peers_[size_t(root)];
        const std::string doing = cat(at, ": receiving from rank ", root);
        check_data(recv_header(fd, k_data, deadline, timeout_s_, doing), root);
        recv_all(fd, data, bytes, deadline, timeout_s_, doing);
      }
      for (int32_t r = 1; r < world_size_; ++r) {
        if (r == root) continue;
        const std::string doing = cat(at, ": sending to rank ", r);
        send_header(peers_[size_t(r)], header{k_data, round, root, bytes}, deadline, timeout_s_, doing);
        send_all(peers_[size_t(r)], data, bytes, deadline, timeout_s_, doing);
      }
      for (int32_t r = 1; r < world_size_; ++r) {
        const header h = recv_header(peers_[size_t(r)], k_ack, deadline, timeout_s_,
                                     cat(at, ": waiting for rank ", r, " to acknowledge"));
        if (h.round != round) fail(TYCHO_ERR_IO, at, ": rank ", r, " acknowledged round ", h.round);
      }
      for (int32_t r = 1; r < world_size_; ++r)
        send_header(peers_[size_t(r)], header{k_done, round, 0, 0}, deadline, timeout_s_,
                    cat(at, ": telling rank ", r, " that all have the bytes"));
    } else {
      const int fd = peers_[0];
      if (rank_ == root) {
        const std::string doing = cat(at, ": sending to rank 0");
        send_header(fd, header{k_data, round, root, bytes}, deadline, timeout_s_, doing);
        send_all(fd, data, bytes, deadline, timeout_s_, doing);
      } else {
        const std::string doing = cat(at, ": receiving from rank 0");
        check_data(recv_header(fd, k_data, deadline, timeout_s_, doing), 0);
        recv_all(fd, data, bytes, deadline, timeout_s_, doing);
      }
      send_header(fd, header{k_ack, round, rank_, 0}, deadline, timeout_s_,
                  cat(at, ": acknowledging to rank 0"));
      const header h = recv_header(fd, k_done, deadline, timeout_s_,
                                   cat(at, ": waiting for rank 0 to hear from every rank"));
      if (h.round != round) fail(TYCHO_ERR_IO, at, ": rank 0 finished round ", h.round);
    }
  } catch (const error& e) {
    fail_and_close(e.what());
  }
}

}  // namespace tycho::host
