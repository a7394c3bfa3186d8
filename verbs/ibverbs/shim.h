// Internals of our libibverbs.so.1 (docs/IBVERBS.md): how the structs a program sees
// (ibv_device, ibv_context, ibv_cq, ...) carry our own state. Each public struct is the first
// member of a standard-layout "box", so the pointer the program hands back converts to the box
// with one cast; the box points at the library object that does the work.
#pragma once

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstdint>
#include <string>

#define RRDMA_EXPORT __attribute__((visibility("default")))

namespace rrdma::ibverbs {

// Verbs report errors in two ways (see each man page): functions returning a pointer set
// errno and return NULL; functions returning int return the errno value itself.
template <typename T>
T* fail_null(int error) {
  errno = error;
  return nullptr;
}
inline int fail_code(int error) {
  errno = error;
  return error;
}

// One vnic as libibverbs presents it. Lives until the process ends (a context keeps a pointer
// to its device, and ibv_free_device_list does not end a context, ibv_get_device_list(3)).
struct DeviceBox {
  ibv_device device;   // first: ibv_device* <-> DeviceBox*
  int index;           // ibv_get_device_index
  std::uint64_t guid;  // network byte order; 0 until learnt from open_device
  bool guid_known;
};
static_assert(std::is_standard_layout_v<DeviceBox>);

inline DeviceBox* box_of(ibv_device* device) { return reinterpret_cast<DeviceBox*>(device); }

// The vnic names ibv_get_device_list offers (RRDMA_DEVICES, else every running vnic).
std::string run_dir();

}  // namespace rrdma::ibverbs
