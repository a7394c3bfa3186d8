// Reads the frames of a pcap or pcapng file with libpcap, for tests over real bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rrdma::test {

using Frame = std::vector<std::uint8_t>;

// Every frame of the file, in order. Throws std::runtime_error if it cannot be read
// or is not an Ethernet capture.
std::vector<Frame> read_capture(const std::string& path);

// Path of a file in tests/data/.
std::string data_path(const std::string& name);

}  // namespace rrdma::test
