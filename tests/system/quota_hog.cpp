// rrdma_quota_hog: the two programs of tests/system/quotas.sh, over the C++ API.
//
//   rrdma_quota_hog --dev NAME hog --limit N --ready FILE
//     One context, PD and CQ, then RC QPs until create_qp is refused or N exist. Prints
//     "created C" and "refused ERRNO NAME" (or "refused none"). When the refusal was not
//     ENOMEM (a daemon without quotas ran out of descriptors: EIO when it dropped the
//     connection, ETIMEDOUT when it stopped answering; closing the connection gives
//     everything back), it opens the device again and takes C - 1 QPs, as a program
//     that learnt the limit would: "held H". Writes FILE, and holds everything until it is
//     killed.
//   rrdma_quota_hog --dev NAME victim
//     A PD, a CQ and two RC QPs connected to each other through the vnic (loopback), one
//     4 KiB RDMA WRITE, the bytes compared. Prints "victim ok", or the failed step and its
//     errno, and exits 1.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "verbs/app/api.h"

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

// One device, PD and CQ, and as many RC QPs as it could get (up to `limit`).
struct Holding {
  v::Context context;
  v::ProtectionDomain pd;
  v::CompletionQueue cq;
  std::vector<v::QueuePair> qps;
  int refusal = 0;  // the errno that stopped it, 0 if it reached the limit
};

std::unique_ptr<Holding> take_qps(const std::string& dev, long limit) {
  v::Context context = v::Context::open(dev);
  v::ProtectionDomain pd = context.alloc_pd();
  v::CompletionQueue cq = context.create_cq(16);
  auto held = std::make_unique<Holding>(Holding{std::move(context), std::move(pd), std::move(cq), {}, 0});
  // Small queues: the quota under test is the number of QPs, not ring bytes.
  const v::QpCapabilities caps{.max_send_wr = 1, .max_recv_wr = 1};
  while (static_cast<long>(held->qps.size()) < limit) {
    try {
      held->qps.push_back(held->pd.create_qp(v::QpType::Rc, held->cq, caps));
    } catch (const v::Error& error) {
      held->refusal = error.error_number();
      std::printf("message %s\n", error.what());
      break;
    }
  }
  return held;
}

int hog(const std::string& dev, long limit, const std::string& ready_file) {
  std::unique_ptr<Holding> held = take_qps(dev, limit);
  const int refusal = held->refusal;
  const std::size_t created = held->qps.size();
  std::printf("created %zu\n", created);
  std::printf("refused %s%s\n", refusal == 0 ? "none" : std::to_string(refusal).c_str(),
              refusal == 0 ? "" : (std::string(" ") + errno_name(refusal)).c_str());
  if (refusal != 0 && refusal != ENOMEM && created > 1) {
    held.reset();  // closes the broken connection: the daemon frees what it held
    held = take_qps(dev, static_cast<long>(created) - 1);
    std::printf("held %zu\n", held->qps.size());
  }
  std::fflush(stdout);
  std::ofstream(ready_file) << held->qps.size() << "\n";
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
