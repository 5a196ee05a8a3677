// PeerWatch: tells whether the client of an HTTP request has gone away, without writing to it.
//
// cpp-httplib 0.11 gives handlers no socket, and its DataSink::is_writable() only asks whether a
// write would block, which stays true after the peer closed. Detecting a disconnect by writing
// would take two writes (the first succeeds into the kernel buffer, the peer answers RST, the
// second fails) and is impossible while a non-streamed request waits silently. So PeerWatch finds
// the connection's socket among this process's descriptors (/proc/self/fd) by its two addresses,
// which the Request carries, and polls it: the peer's FIN shows as POLLRDHUP or as a readable
// socket whose MSG_PEEK reads 0 bytes. It never reads or writes the socket.
//
// The descriptor is valid while the handler runs: httplib closes a connection only after its
// handler (and content provider) returned. On a platform without /proc, Find() fails and
// PeerClosed() stays false; the server then notices a disconnect only through failed writes.
//
// Thread-safety: one PeerWatch per request, used by the thread that serves it.
#ifndef LLMRT_SERVER_PEER_WATCH_H_
#define LLMRT_SERVER_PEER_WATCH_H_

#include <string>

namespace llmrt::server {

class PeerWatch {
 public:
  // Looks up the socket whose local end is local_addr:local_port and whose peer is
  // remote_addr:remote_port (numeric addresses, as httplib reports them).
  PeerWatch(const std::string& local_addr, int local_port, const std::string& remote_addr,
            int remote_port);
  bool found() const { return fd_ >= 0; }
  // True once the peer closed or reset the connection.
  bool PeerClosed() const;

 private:
  int fd_ = -1;
};

}  // namespace llmrt::server

#endif  // LLMRT_SERVER_PEER_WATCH_H_
