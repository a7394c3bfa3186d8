// rrdma_many_qps: holds many QPs on a vnic, for the system test of a large `status`.
//
//   rrdma_many_qps --dev VNIC --qps N --ready FILE
// Opens VNIC, one PD and one CQ, creates N RC QPs (the smallest queues), writes the QP
// numbers to FILE (one per line, written to FILE.tmp and renamed, so a reader never sees
// half a list), then holds everything until stdin reaches its end or SIGTERM arrives.
// Exit 1 (and the reason on stderr) when a QP cannot be created.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "verbs/app/api.h"

namespace v = rrdma::verbs;

int main(int argc, char** argv) {
  std::string device, ready;
  long count = -1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string option = argv[i];
    if (option == "--dev") device = argv[i + 1];
    else if (option == "--ready") ready = argv[i + 1];
    else if (option == "--qps") count = std::strtol(argv[i + 1], nullptr, 10);
  }
  if (device.empty() || ready.empty() || count < 1 || count > 100000 || argc != 7) {
    std::fprintf(stderr, "usage: %s --dev VNIC --qps N --ready FILE\n", argv[0]);
    return 2;
  }
  try {
    v::Context context = v::Context::open(device);
    v::ProtectionDomain pd = context.alloc_pd();
    v::CompletionQueue cq = context.create_cq(16);
    v::QpCapabilities caps;
    caps.max_send_wr = 1;
    caps.max_recv_wr = 1;
    std::vector<v::QueuePair> qps;
    qps.reserve(static_cast<std::size_t>(count));
    for (long i = 0; i < count; ++i) {
      try {
        qps.push_back(pd.create_qp(v::QpType::Rc, cq, caps));
      } catch (const v::Error& failure) {
        std::fprintf(stderr, "create_qp #%ld of %ld: %s\n", i + 1, count, failure.what());
        return 1;
      }
    }
    {
      std::ofstream out(ready + ".tmp");
      for (const auto& qp : qps) out << qp.qp_num() << "\n";
      if (!out) throw std::runtime_error("cannot write " + ready + ".tmp");
    }
    if (std::rename((ready + ".tmp").c_str(), ready.c_str()) != 0) {
      throw std::runtime_error("cannot rename to " + ready);
    }
    // Hold until told: stdin's end (the test closes it) or SIGTERM (default action: exit).
    char buffer[64];
    while (::read(STDIN_FILENO, buffer, sizeof(buffer)) > 0) {
    }
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "%s\n", failure.what());
    return 1;
  }
  return 0;
}
