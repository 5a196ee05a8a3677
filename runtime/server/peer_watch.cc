#include "runtime/server/peer_watch.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace llmrt::server {
namespace {

// Numeric host and port of a socket address; false for non-IP families.
bool Describe(const sockaddr_storage& address, std::string& host, int& port) {
  char buffer[INET6_ADDRSTRLEN] = {0};
  if (address.ss_family == AF_INET) {
    const auto& ipv4 = reinterpret_cast<const sockaddr_in&>(address);
    if (inet_ntop(AF_INET, &ipv4.sin_addr, buffer, sizeof(buffer)) == nullptr) return false;
    port = ntohs(ipv4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& ipv6 = reinterpret_cast<const sockaddr_in6&>(address);
    if (inet_ntop(AF_INET6, &ipv6.sin6_addr, buffer, sizeof(buffer)) == nullptr) return false;
    port = ntohs(ipv6.sin6_port);
  } else {
    return false;
  }
  host = buffer;
  return true;
}

}  // namespace

PeerWatch::PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
                     int remote_port) {
  DIR* directory = opendir("/proc/self/fd");
  if (directory == nullptr) return;
  const int directory_fd = dirfd(directory);
  while (const dirent* entry = readdir(directory)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == directory_fd) continue;
    struct stat info;
    if (fstat(static_cast<int>(fd), &info) != 0 || !S_ISSOCK(info.st_mode)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_size = sizeof(local), peer_size = sizeof(peer);
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
        getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0) {
      continue;
    }
    std::string local_host, peer_host;
    int local_port_found = 0, peer_port_found = 0;
    if (!Describe(local, local_host, local_port_found) ||
        !Describe(peer, peer_host, peer_port_found)) {
      continue;
    }
    if (local_port_found == local_port && peer_port_found == remote_port &&
        peer_host == remote_addr && (local_addr.empty() || local_host == local_addr)) {
      fd_ = static_cast<int>(fd);
      break;
    }
  }
  closedir(directory);
}

bool PeerWatch::PeerClosed() const {
  if (fd_ < 0) return false;
  pollfd watched{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&watched, 1, 0) <= 0) return false;
  if (watched.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (watched.revents & POLLIN) {
    // Readable: either the peer closed (0 bytes) or it already sent its next request on this
    // keep-alive connection (data), which must stay in the socket for httplib.
    char byte;
    const ssize_t peeked = recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return peeked == 0 || (peeked < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
  }
  return false;
}

}  // namespace llmrt::server
