// rc_pingpong: two processes bounce a message back and forth over a Reliable Connected (RC)
// queue pair, like ibv_rc_pingpong from rdma-core, written with the rrdma::verbs C++ API.
//
//   server:  rc_pingpong --dev vnA
//   client:  rc_pingpong --dev vnB 10.0.0.20      (the server's address on the kernel network)
//
// What happens, in RDMA terms:
//  1. Open the device (a vnic) and allocate a protection domain: every resource below
//     belongs to it, and the NIC only lets a QP touch memory registered in the same PD.
//  2. Register a buffer: the NIC gets the right to read and write it and hands back an
//     L_Key that work requests must quote.
//  3. Create two completion queues (one for sends, one for receives) and a QP that
//     reports to them.
//  4. Post a receive before anything can arrive: RC has no buffering of its own, a SEND
//     that finds no receive waiting is refused with "receiver not ready" (RNR) and retried.
//  5. Exchange (QP number, first PSN, GID) with the peer over TCP, then walk the QP
//     through INIT -> RTR (ready to receive: now it knows its peer) -> RTS (ready to send).
//  6. Ping-pong: the client SENDs, the server's receive completes, it SENDs back, and so on.
//     Every message carries its iteration number, which the receiver checks.
//  7. Tell the peer we are done over TCP, so nobody destroys its QP while the other side
//     still waits for an acknowledgement.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "examples/side_channel.h"
#include "verbs/app/api.h"

namespace rv = rrdma::verbs;

namespace {

struct Options {
  std::string device;
  std::string server;  // empty: we are the server
  std::uint16_t port = 18515;
  std::uint32_t size = 4096;
  std::uint32_t iterations = 1000;
  bool events = false;
};

constexpr std::uint64_t kRecvId = 1;
constexpr std::uint64_t kSendId = 2;

// With --events the program sleeps on the completion channel instead of polling: arm the
// CQ (req_notify), poll once more to catch a completion that raced with the arm, and only
// then sleep until the NIC signals the channel.
rv::WorkCompletion wait_completion(rv::CompletionQueue& cq, rv::CompletionChannel* channel) {
  if (channel == nullptr) return cq.wait_ok();
  for (;;) {
    if (auto wc = cq.poll_one()) {
      if (!wc->ok()) throw rv::Error(wc->status(), wc->describe());
      return *wc;
    }
    cq.req_notify();
    if (auto wc = cq.poll_one()) {
      if (!wc->ok()) throw rv::Error(wc->status(), wc->describe());
      return *wc;
    }
    if (channel->get_event(std::chrono::seconds(10)) == nullptr) throw rv::Error(ETIMEDOUT, "no completion event");
    cq.ack_events(1);
  }
}

// The message of iteration i: its number, then a pattern derived from it.
void fill(std::span<std::byte> message, std::uint32_t iteration) {
  for (std::size_t i = 0; i < message.size(); ++i) message[i] = std::byte(static_cast<std::uint8_t>(iteration + i));
}

bool check(std::span<const std::byte> message, std::uint32_t iteration) {
  for (std::size_t i = 0; i < message.size(); ++i) {
    if (message[i] != std::byte(static_cast<std::uint8_t>(iteration + i))) return false;
  }
  return true;
}

int run(const Options& options) {
  const bool is_server = options.server.empty();

  // 1-2: device, protection domain, registered memory. Half the buffer receives, half sends,
  // so a send never overwrites a message still being received.
  rv::Context context = rv::Context::open(options.device);
  rv::ProtectionDomain pd = context.alloc_pd();
  std::vector<std::byte> buffer(2 * std::size_t{options.size});
  rv::MemoryRegion mr = pd.register_memory(std::span(buffer), rv::access::kLocalWrite);
  const rv::Sge receive_area = mr.sge(0, options.size);
  const rv::Sge send_area = mr.sge(options.size, options.size);

  // 3: completion queues (the receive one on a channel when sleeping on events) and the QP.
  std::optional<rv::CompletionChannel> channel;
  if (options.events) channel.emplace(context.create_completion_channel());
  rv::CompletionQueue send_cq = context.create_cq(16);
  rv::CompletionQueue recv_cq = context.create_cq(16, channel ? &*channel : nullptr);
  rv::QueuePair qp = pd.create_qp(rv::QpType::Rc, send_cq, recv_cq, {.max_send_wr = 16, .max_recv_wr = 16});

  // 4: the QP must be in INIT (at least) to accept receives.
  qp.to_init();
  qp.post_receive({kRecvId, std::span(&receive_area, 1)});

  // 5: swap endpoints, connect.
  examples::SideChannel side = is_server ? examples::SideChannel::serve(options.port)
                                         : examples::SideChannel::connect(options.server, options.port);
  const rv::Endpoint local = qp.local_endpoint();
  side.send_line(local.encode());
  const auto remote = rv::Endpoint::decode(side.receive_line());
  if (!remote) throw std::runtime_error("the peer sent a malformed endpoint");
  std::cout << "local  QP " << local.qpn << ", PSN " << local.psn << ", GID " << local.gid.to_string() << "\n"
            << "remote QP " << remote->qpn << ", PSN " << remote->psn << ", GID " << remote->gid.to_string() << "\n";
  qp.to_rtr(*remote);
  qp.to_rts();
  side.send_line("ready");  // both QPs are in RTS before the first message flies
  side.receive_line();

  // 6: the ping-pong. The client speaks first.
  auto send_message = [&](std::uint32_t iteration) {
    fill(mr.bytes().subspan(options.size, options.size), iteration);
    qp.post_send(rv::SendWorkRequest::send(kSendId, std::span(&send_area, 1)));
    send_cq.wait_ok();  // the peer's NIC acknowledged it: the buffer is free again
  };
  auto receive_message = [&](std::uint32_t iteration) {
    const rv::WorkCompletion wc = wait_completion(recv_cq, channel ? &*channel : nullptr);
    if (wc.byte_len() != options.size || !check(mr.bytes().subspan(0, options.size), iteration)) {
      throw std::runtime_error("iteration " + std::to_string(iteration) + ": wrong message received");
    }
    qp.post_receive({kRecvId, std::span(&receive_area, 1)});  // ready for the next one
  };

  const auto start = std::chrono::steady_clock::now();
  for (std::uint32_t i = 0; i < options.iterations; ++i) {
    if (is_server) {
      receive_message(i);
      send_message(i);
    } else {
      send_message(i);
      receive_message(i);
    }
  }
  const std::chrono::duration<double, std::micro> elapsed = std::chrono::steady_clock::now() - start;

  // 7: goodbye over TCP, then the RAII handles release QP, CQs, MR, PD, context.
  side.send_line("done");
  side.receive_line();

  const double bytes = 2.0 * options.size * options.iterations;
  std::cout << bytes << " bytes in " << elapsed.count() / 1e6 << " seconds = " << bytes * 8 / elapsed.count()
            << " Mbit/sec\n"
            << options.iterations << " iters in " << elapsed.count() / 1e6 << " seconds = "
            << elapsed.count() / options.iterations << " usec/iter\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"RC ping-pong over a vnic (like ibv_rc_pingpong)"};
  app.add_option("--dev,-d", options.device, "the vnic to use (see `rrdma-vnic list`)")->required();
  app.add_option("server", options.server, "the server's address; omit to be the server");
  app.add_option("--port,-p", options.port, "TCP port of the side channel");
  app.add_option("--size,-s", options.size, "message size in bytes")->check(CLI::Range(1u, 1u << 24));
  app.add_option("--iters,-n", options.iterations, "round trips");
  app.add_flag("--events,-e", options.events, "sleep on a completion channel instead of polling");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(options);
  } catch (const rv::Error& error) {
    std::cerr << "rc_pingpong: " << error.what() << "\n";
  } catch (const std::exception& error) {
    std::cerr << "rc_pingpong: " << error.what() << "\n";
  }
  return 1;
}
