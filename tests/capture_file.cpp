#include "tests/capture_file.h"

#include <pcap/pcap.h>

#include <memory>
#include <stdexcept>

namespace rrdma::test {

std::vector<Frame> read_capture(const std::string& path) {
  char err[PCAP_ERRBUF_SIZE] = {};
  std::unique_ptr<pcap_t, decltype(&pcap_close)> pcap(pcap_open_offline(path.c_str(), err), &pcap_close);
  if (!pcap) throw std::runtime_error("cannot read " + path + ": " + err);
  if (pcap_datalink(pcap.get()) != DLT_EN10MB) throw std::runtime_error(path + ": not an Ethernet capture");
  std::vector<Frame> frames;
  pcap_pkthdr* header = nullptr;
  const u_char* data = nullptr;
  int rc;
  while ((rc = pcap_next_ex(pcap.get(), &header, &data)) == 1) {
    if (header->caplen != header->len) throw std::runtime_error(path + ": truncated frame in capture");
    frames.emplace_back(data, data + header->caplen);
  }
  if (rc == PCAP_ERROR) throw std::runtime_error(path + ": " + pcap_geterr(pcap.get()));
  return frames;
}

std::string data_path(const std::string& name) { return std::string(RRDMA_TEST_DATA_DIR) + "/" + name; }

}  // namespace rrdma::test
