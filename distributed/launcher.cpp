#include "distributed/launcher.hpp"

#include <algorithm>
#include <cerrno>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <spdlog/spdlog.h>

namespace fedcore::distributed {
namespace {

int exit_code(int status) {
  if (WIFEXITED(status))
    return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    return 128 + WTERMSIG(status);
  return 1;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string text;
  for (int cpu : cpus)
    text += (text.empty() ? "" : ",") + std::to_string(cpu);
  return text;
}

// Forks and execs a worker, bound to `cpus` unless that is empty. The mask is set before
// exec so that every thread the worker ever starts (OpenMP, OpenBLAS) inherits it.
pid_t spawn(const std::string& exe, const std::vector<std::string>& args,
            const std::vector<int>& cpus) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid != 0)
    return pid;
  // Child: die with the launcher; then become the worker.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent)
    _exit(126);
  if (!bind_to_cpus(cpus))
    std::perror("fedcore-dist launch: sched_setaffinity (worker left unbound)");
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(exe.c_str()));
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(exe.c_str(), argv.data());
  std::perror("fedcore-dist launch: execv");
  _exit(127);
}

// Stops the workers still running: SIGTERM, up to `grace`, then SIGKILL; reaps them all.
void stop_all(std::vector<pid_t>& running, std::chrono::milliseconds grace) {
  for (pid_t pid : running)
    kill(pid, SIGTERM);
  const auto until = std::chrono::steady_clock::now() + grace;
  while (!running.empty() && std::chrono::steady_clock::now() < until) {
    for (auto it = running.begin(); it != running.end();) {
      int status = 0;
      it = waitpid(*it, &status, WNOHANG) == *it ? running.erase(it) : it + 1;
    }
    if (!running.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (pid_t pid : running) {
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
  }
  running.clear();
}

// One attempt; returns 0 or the first failure's exit code.
int attempt(const LaunchOptions& o) {
  const int port = pick_free_port(o.host);
  if (port <= 0) {
    spdlog::error("fedcore-dist launch: no free port on {}", o.host);
    return 1;
  }
  const std::string rendezvous = o.host + ":" + std::to_string(port);
  const auto blocks = cpu_blocks(o.nproc, o.binding, allowed_cpus());
  if (o.nproc > 1 && !blocks.front().empty()) {
    std::string placement;
    for (const auto& block : blocks)
      placement += (placement.empty() ? "" : " | ") + cpu_list(block);
    spdlog::info("fedcore-dist launch: ranks bound to CPUs {} (--bind none to unbind)", placement);
  }
  std::vector<pid_t> running;
  for (int rank = 0; rank < o.nproc; ++rank) {
    std::vector<std::string> args{
        "worker",       "--rank",  std::to_string(rank), "--world", std::to_string(o.nproc),
        "--rendezvous", rendezvous};
    args.insert(args.end(), o.worker_args.begin(), o.worker_args.end());
    const pid_t pid = spawn(o.executable, args, blocks[static_cast<std::size_t>(rank)]);
    if (pid < 0) {
      std::perror("fedcore-dist launch: fork");
      stop_all(running, o.stop_grace);
      return 1;
    }
    running.push_back(pid);
  }
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    std::erase(running, pid);
    const int code = exit_code(status);
    if (code != 0) {
      spdlog::error("fedcore-dist launch: worker pid {} exited with {}; stopping the job",
                    static_cast<int>(pid), code);
      stop_all(running, o.stop_grace);
      return code;
    }
  }
  return 0;
}

}  // namespace

std::vector<std::vector<int>> cpu_blocks(int nproc, CpuBinding binding,
                                         const std::vector<int>& allowed) {
  std::vector<std::vector<int>> blocks(static_cast<std::size_t>(std::max(nproc, 0)));
  const auto cpus = static_cast<int>(allowed.size());
  if (binding == CpuBinding::none || nproc <= 0 || nproc > cpus)
    return blocks;
  const int per_rank = cpus / nproc;
  for (int rank = 0; rank < nproc; ++rank) {
    const auto first = allowed.begin() + rank * per_rank;
    blocks[static_cast<std::size_t>(rank)].assign(first, first + per_rank);
  }
  return blocks;
}

bool bind_to_cpus(const std::vector<int>& cpus) {
  if (cpus.empty())
    return true;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus)
    CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set))
      cpus.push_back(cpu);
  }
  return cpus;
}

int pick_free_port(const std::string& host) {
  boost::asio::io_context io;
  boost::system::error_code ec;
  const auto ip = boost::asio::ip::make_address(host, ec);
  if (ec)
    return -1;
  boost::asio::ip::tcp::acceptor acceptor(io);
  acceptor.open(ip.is_v4() ? boost::asio::ip::tcp::v4() : boost::asio::ip::tcp::v6(), ec);
  if (!ec)
    acceptor.bind({ip, 0}, ec);
  if (ec)
    return -1;
  return acceptor.local_endpoint().port();
}

int launch(const LaunchOptions& o) {
  int code = 0;
  for (int round = 0; round <= o.max_restarts; ++round) {
    if (round > 0) {
      spdlog::warn("fedcore-dist launch: restart {} of {} (from the last checkpoint)", round,
                   o.max_restarts);
    }
    code = attempt(o);
    if (code == 0)
      return 0;
  }
  return code;
}

}  // namespace fedcore::distributed
