// write_read_demo: one-sided RDMA. The client WRITEs a message straight into the server's
// memory, READs it back from there, and checks that both agree — while the server's
// program does nothing at all: it only registered the memory and said where it is.
//
//   server:  write_read_demo --dev vnA
//   client:  write_read_demo --dev vnB 10.0.0.20
//
// In RDMA terms:
//  - The server registers a buffer with REMOTE_WRITE and REMOTE_READ access. The NIC
//    answers with an R_Key: whoever presents it (with an address inside the buffer) may
//    write or read there, through the server's NIC, without the server's CPU.
//  - The server sends (address, R_Key, length) and its QP endpoint over TCP. That is the
//    whole "protocol": there is no receive posted and no completion on the server side for
//    a WRITE or a READ (only WRITE_WITH_IMM would consume a receive).
//  - The client posts an RDMA WRITE (its local buffer -> the server's address), waits for
//    the completion (the server's NIC acknowledged: the data is in the server's memory),
//    then an RDMA READ (the server's memory -> a second local buffer) and compares.
//  - Finally the server prints what its memory holds now, to show the WRITE landed.
#include <CLI/CLI.hpp>

#include <algorithm>
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
  std::string server;
  std::uint16_t port = 18516;
  std::string message = "Hello from the other namespace, written by RDMA WRITE!";
};

// Both sides: device, PD, one CQ, an RC QP connected to the peer's (exchanged over `side`).
struct Connection {
  rv::Context context;
  rv::ProtectionDomain pd;
  rv::CompletionQueue cq;
  rv::QueuePair qp;

  explicit Connection(const std::string& device)
      : context(rv::Context::open(device)),
        pd(context.alloc_pd()),
        cq(context.create_cq(16)),
        qp(pd.create_qp(rv::QpType::Rc, cq)) {}

  void connect(examples::SideChannel& side) {
    // The server must let the peer's READs and WRITEs in: the QP grants remote access (the
    // MR must allow it too). to_init's default grants remote write, read and atomics.
    qp.to_init();
    side.send_line(qp.local_endpoint().encode());
    const auto peer = rv::Endpoint::decode(side.receive_line());
    if (!peer) throw std::runtime_error("the peer sent a malformed endpoint");
    qp.to_rtr(*peer);
    qp.to_rts();
  }
};

int run_server(const Options& options) {
  Connection connection(options.device);
  // The buffer the client will write into and read from; cleared so the change shows.
  std::vector<char> buffer(4096, '\0');
  rv::MemoryRegion mr = connection.pd.register_memory(
      std::span(buffer), rv::access::kLocalWrite | rv::access::kRemoteWrite | rv::access::kRemoteRead);

  examples::SideChannel side = examples::SideChannel::serve(options.port);
  connection.connect(side);
  side.send_line(mr.remote().encode());
  std::cout << "server: registered " << mr.length() << " bytes at 0x" << std::hex << mr.address() << std::dec
            << " (rkey 0x" << std::hex << mr.rkey() << std::dec << "), waiting...\n";

  // Nothing to do until the client says it is finished: its WRITE and READ need no help
  // from this program.
  if (side.receive_line() != "done") throw std::runtime_error("unexpected message from the client");
  std::cout << "server: my buffer now holds: \"" << buffer.data() << "\"\n";
  side.send_line("bye");
  return 0;
}

int run_client(const Options& options) {
  Connection connection(options.device);
  std::vector<char> outgoing(options.message.begin(), options.message.end());
  outgoing.push_back('\0');
  std::vector<char> read_back(outgoing.size(), '\0');
  // Local buffers: the NIC reads `outgoing` (for the WRITE) and writes `read_back` (the
  // READ's response lands there), so the latter needs LOCAL_WRITE.
  rv::MemoryRegion out_mr = connection.pd.register_memory(std::span(outgoing));
  rv::MemoryRegion in_mr = connection.pd.register_memory(std::span(read_back), rv::access::kLocalWrite);

  examples::SideChannel side = examples::SideChannel::connect(options.server, options.port);
  connection.connect(side);
  const auto remote = rv::RemoteBuffer::decode(side.receive_line());
  if (!remote) throw std::runtime_error("the server sent a malformed buffer description");
  if (remote->length < outgoing.size()) throw std::runtime_error("the server's buffer is too small");
  std::cout << "client: server buffer at 0x" << std::hex << remote->addr << ", rkey 0x" << remote->rkey << std::dec
            << ", " << remote->length << " bytes\n";

  // RDMA WRITE: our bytes -> their memory. The completion means the server's NIC has
  // acknowledged the data (RC): it is in the server's buffer.
  const rv::Sge write_source = out_mr.sge();
  connection.qp.post_send(rv::SendWorkRequest::write(1, std::span(&write_source, 1), *remote));
  connection.cq.wait_ok();
  std::cout << "client: wrote " << outgoing.size() << " bytes\n";

  // RDMA READ: their memory -> our second buffer.
  const rv::Sge read_target = in_mr.sge();
  connection.qp.post_send(rv::SendWorkRequest::read(2, std::span(&read_target, 1), *remote));
  const rv::WorkCompletion wc = connection.cq.wait_ok();
  std::cout << "client: read back " << wc.byte_len() << " bytes: \"" << read_back.data() << "\"\n";

  const bool same = std::equal(outgoing.begin(), outgoing.end(), read_back.begin());
  std::cout << (same ? "client: verified, the READ returned what the WRITE put there\n"
                     : "client: MISMATCH between what was written and what was read\n");
  side.send_line("done");
  side.receive_line();
  return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"RDMA WRITE then READ into another process's memory"};
  app.add_option("--dev,-d", options.device, "the vnic to use (see `rrdma-vnic list`)")->required();
  app.add_option("server", options.server, "the server's address; omit to be the server");
  app.add_option("--port,-p", options.port, "TCP port of the side channel");
  app.add_option("--message,-m", options.message, "what the client writes");
  CLI11_PARSE(app, argc, argv);
  try {
    return options.server.empty() ? run_server(options) : run_client(options);
  } catch (const std::exception& error) {
    std::cerr << "write_read_demo: " << error.what() << "\n";
  }
  return 1;
}
