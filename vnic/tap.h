// The TAP device: the vnic's wire. Each read() returns one Ethernet frame the kernel
// (the bridge) sends to the vnic; each write() hands one frame to the kernel. The fd is
// non-persistent, so closing it removes the interface.
#pragma once

#include <string>

namespace rrdma::vnic {

class TapDevice {
 public:
  // Creates the TAP named `name` (IFF_TAP | IFF_NO_PI: raw Ethernet frames, no packet
  // information prefix). IFF_TUN_EXCL makes the kernel refuse an existing name instead
  // of attaching us to someone else's persistent TAP. Throws std::system_error.
  static TapDevice create(const std::string& name);

  TapDevice(TapDevice&& other) noexcept;
  TapDevice& operator=(TapDevice&& other) noexcept;
  TapDevice(const TapDevice&) = delete;
  TapDevice& operator=(const TapDevice&) = delete;
  ~TapDevice();

  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  // Closing the only fd of a non-persistent TAP unregisters the interface at once.
  void close();

 private:
  TapDevice(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  int fd_ = -1;
  std::string name_;
};

}  // namespace rrdma::vnic
