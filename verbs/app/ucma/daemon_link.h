// Runs in the application process (the rdma_cm shim, librrdma_ucma.so).
//
// The process's one command connection to a vnic's daemon (verbs/contract/ucma_protocol.h):
// a SOCK_SEQPACKET connection to <run dir>/<vnic>.sock, opened on first use, one request and
// its reply at a time under one mutex. Only this process uses it: a forked child (another
// pid) opens its own and keeps using the channels it inherited, as a child keeps a kernel
// ucma file. No call waits on a channel while holding the mutex.
//
// The vnic is the one libibverbs (our drop-in, verbs/app/ibverbs) shows the program: with
// RRDMA_DEVICES set, its first listed name whose daemon answers; without it, the first
// answering vnic in name order. One vnic serves the whole process.
#pragma once

#include <cstdint>
#include <vector>

#include "verbs/contract/ucma_protocol.h"

namespace rrdma::ucma_shim {

struct DaemonReply {
  int error = 0;              // 0, the daemon's errno, ENODEV (no daemon, or it went away), EIO
  std::uint64_t channel = 0;  // CreateChannel: the new channel's token
  int fd = -1;                // CreateChannel: the channel's descriptor, the caller's to close
  std::vector<std::uint8_t> body;
};

// Sends `request` (its request id is chosen here) and waits for its reply.
DaemonReply call_daemon(verbs::ucma::Frame request);

// Keeps fork() from copying a locked mutex into the child (pthread_atfork).
void install_fork_handlers();

}  // namespace rrdma::ucma_shim
