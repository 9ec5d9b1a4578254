#include "bench_record.hpp"

#include <sys/resource.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace tycho::bench {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

// stdout of a shell command; nullopt-like: ok = false if it could not run or exited non-zero.
bool run_command(const std::string& cmd, std::string& out) {
  out.clear();
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  return pclose(p) == 0;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The value after "key:" on the first line of `file` that starts with `key`.
std::string proc_value(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, key.size(), key) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return trim(line.substr(colon + 1));
    }
  return "";
}

}  // namespace

machine_info this_machine() {
  machine_info m;
  m.cpu = proc_value("/proc/cpuinfo", "model name");
  if (m.cpu.empty()) m.cpu = "unknown";
  m.cores = std::thread::hardware_concurrency();
  std::istringstream kib(proc_value("/proc/meminfo", "MemTotal"));  // "24576000 kB"
  double v = 0;
  if (kib >> v) m.memory_GiB = v / (1024.0 * 1024.0);
  return m;
}

std::string iso_utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string git_commit(const std::string& source_dir) {
  std::string dir = shell_quote(source_dir), hash, status;
  if (!run_command("git -C " + dir + " rev-parse --short HEAD 2>/dev/null", hash)) return "unknown";
  hash = trim(hash);
  if (hash.empty()) return "unknown";
  if (!run_command("git -C " + dir + " status --porcelain 2>/dev/null", status)) return hash;
  return trim(status).empty() ? hash : hash + "-dirty";
}

double peak_rss_MiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // Linux: KiB
}

cpu_sample sample_cpu() {
  cpu_sample c;
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal)
    c.machine_busy_s = (user + nice + system + irq + softirq + steal) / double(sysconf(_SC_CLK_TCK));
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  c.self_s = double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
             1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return c;
}

double other_cpu_load(const cpu_sample& a, const cpu_sample& b) {
  double wall = b.wall_s - a.wall_s;
  if (!(wall > 0)) return 0;
  double others = (b.machine_busy_s - a.machine_busy_s) - (b.self_s - a.self_s);
  return std::max(0.0, others / wall);
}

void append_line(const std::string& path, const std::string& line) {
  std::ofstream out(path, std::ios::app);
  if (!out) throw std::runtime_error("cannot open '" + path + "' to append the benchmark record");
  out << line << '\n';
  if (!out) throw std::runtime_error("writing '" + path + "' failed");
}

}  // namespace tycho::bench
