// rrdma_quota_hog: the two programs of tests/system/quotas.sh, over the C++ API.
//
//   rrdma_quota_hog --dev NAME hog --limit N --ready FILE
//     One context, PD and CQ, then RC QPs until create_qp is refused or N exist. Prints
//     "created C" and "refused ERRNO NAME" (or "refused none"), writes FILE, and holds
//     everything until it is killed.
//   rrdma_quota_hog --dev NAME victim
//     A PD, a CQ and two RC QPs connected to each other through the vnic (loopback), one
//     4 KiB RDMA WRITE, the bytes compared. Prints "victim ok", or the failed step and its
//     errno, and exits 1.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "verbs/api.h"

namespace {

namespace v = rrdma::verbs;

int usage() {
  std::fprintf(stderr, "usage: rrdma_quota_hog --dev NAME (hog --limit N --ready FILE | victim)\n");
  return 2;
}

const char* errno_name(int error) {
  switch (error) {
    case ENOMEM: return "ENOMEM";
    case EIO: return "EIO";
    case EINVAL: return "EINVAL";
    case EMFILE: return "EMFILE";
    case ENFILE: return "ENFILE";
    case EAGAIN: return "EAGAIN";
    case EPROTO: return "EPROTO";
    case ETIMEDOUT: return "ETIMEDOUT";
    default: return "other";
  }
}

int hog(const std::string& dev, long limit, const std::string& ready_file) {
  v::Context context = v::Context::open(dev);
  v::ProtectionDomain pd = context.alloc_pd();
  v::CompletionQueue cq = context.create_cq(16);
  std::vector<v::QueuePair> qps;
  int refusal = 0;
  // Small queues: the quota under test is the number of QPs, not ring bytes.
  const v::QpCapabilities caps{.max_send_wr = 1, .max_recv_wr = 1};
  while (static_cast<long>(qps.size()) < limit) {
    try {
      qps.push_back(pd.create_qp(v::QpType::Rc, cq, caps));
    } catch (const v::Error& error) {
      refusal = error.error_number();
      std::printf("message %s\n", error.what());
      break;
    }
  }
  std::printf("created %zu\n", qps.size());
  std::printf("refused %s%s\n", refusal == 0 ? "none" : std::to_string(refusal).c_str(),
              refusal == 0 ? "" : (std::string(" ") + errno_name(refusal)).c_str());
  std::fflush(stdout);
  std::ofstream(ready_file) << qps.size() << "\n";
  for (;;) ::pause();  // hold everything until the test kills us
}

int victim(const std::string& dev) {
  const char* step = "open";
  try {
    v::Context context = v::Context::open(dev);
    step = "alloc_pd";
    v::ProtectionDomain pd = context.alloc_pd();
    step = "create_cq";
    v::CompletionQueue cq = context.create_cq(16);
    step = "create_qp";
    v::QueuePair a = pd.create_qp(v::QpType::Rc, cq);
    v::QueuePair b = pd.create_qp(v::QpType::Rc, cq);
    step = "reg_mr";
    std::vector<std::uint8_t> source(4096), target(4096, 0);
    for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<std::uint8_t>(i * 7 + 1);
    v::MemoryRegion from = pd.register_memory(std::span(source));
    v::MemoryRegion to = pd.register_memory(std::span(target), v::access::kLocalWrite | v::access::kRemoteWrite);
    step = "connect";
    const v::Endpoint ea = a.local_endpoint(), eb = b.local_endpoint();
    a.to_init();
    b.to_init();
    a.to_rtr(eb);
    b.to_rtr(ea);
    a.to_rts();
    b.to_rts();
    step = "write";
    const v::Sge sge = from.sge();
    a.post_send(v::SendWorkRequest::write(1, std::span(&sge, 1), to.remote()));
    cq.wait_ok(std::chrono::seconds(10));
    if (target != source) {
      std::printf("victim failed at compare: the target differs\n");
      return 1;
    }
  } catch (const v::Error& error) {
    std::printf("victim failed at %s: errno %d %s: %s\n", step, error.error_number(),
                errno_name(error.error_number()), error.what());
    return 1;
  }
  std::printf("victim ok\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() < 3 || args[0] != "--dev") return usage();
  const std::string dev = args[1];
  if (args[2] == "victim" && args.size() == 3) return victim(dev);
  if (args[2] == "hog" && args.size() == 7 && args[3] == "--limit" && args[5] == "--ready") {
    return hog(dev, std::stol(args[4]), args[6]);
  }
  return usage();
}
