// ucma_probe librdmacm: Debian's librdmacm over the shim (see ucma_probe.cpp). Its
// rdma_create_event_channel runs ucma_init: the device list and GUID from our libibverbs.so.1,
// the AF_IB probe (refused), then the program's own id and one event.
#include <rdma/rdma_cma.h>

#include "tests/ucma/ucma_probe.h"

static_assert(RDMA_CM_EVENT_ESTABLISHED == ucma_probe::kEstablished);
static_assert(RDMA_CM_EVENT_DISCONNECTED == ucma_probe::kDisconnected);

int ucma_probe::run_librdmacm() {
  rdma_event_channel* channel = rdma_create_event_channel();
  CHECK(channel != nullptr);
  rdma_cm_id* id = nullptr;
  int context = 0;
  CHECK(rdma_create_id(channel, &id, &context, RDMA_PS_TCP) == 0);
  rdma_cm_event* event = nullptr;
  CHECK(rdma_get_cm_event(channel, &event) == 0);
  CHECK(event->id == id && id->context == &context && event->event == RDMA_CM_EVENT_ESTABLISHED && event->status == 0);
  CHECK(event->param.conn.private_data_len == 5 && std::memcmp(event->param.conn.private_data, "rrdma", 5) == 0);
  CHECK(event->param.conn.responder_resources == 1 && event->param.conn.initiator_depth == 2);
  CHECK(rdma_ack_cm_event(event) == 0);
  CHECK(rdma_destroy_id(id) == 0);
  rdma_destroy_event_channel(channel);
  std::puts("ucma_probe librdmacm: every check held");
  return 0;
}
