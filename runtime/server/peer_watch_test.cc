#include "runtime/server/peer_watch.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace llmrt::server {
namespace {

// A connected loopback pair: `server_fd` is the accepted end.
struct Connection {
  int listen_fd = -1, client_fd = -1, server_fd = -1;
  int server_port = 0, client_port = 0;
  ~Connection() {
    for (int fd : {listen_fd, client_fd, server_fd}) {
      if (fd >= 0) close(fd);
    }
  }
};

void Connect(Connection& connection) {
  connection.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(connection.listen_fd, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(connection.listen_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(connection.listen_fd, 1), 0);
  socklen_t size = sizeof(address);
  getsockname(connection.listen_fd, reinterpret_cast<sockaddr*>(&address), &size);
  connection.server_port = ntohs(address.sin_port);
  connection.client_fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(connection.client_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)),
            0);
  connection.server_fd = accept(connection.listen_fd, nullptr, nullptr);
  ASSERT_GE(connection.server_fd, 0);
  sockaddr_in client{};
  size = sizeof(client);
  getsockname(connection.client_fd, reinterpret_cast<sockaddr*>(&client), &size);
  connection.client_port = ntohs(client.sin_port);
}

TEST(PeerWatch, FindsTheAcceptedSocketAndSeesTheClientClose) {
  Connection connection;
  Connect(connection);
  PeerWatch watch("127.0.0.1", connection.server_port, "127.0.0.1", connection.client_port);
  ASSERT_TRUE(watch.found());
  EXPECT_FALSE(watch.PeerClosed());
  // Pipelined data from a live client is not a close, and stays unread.
  ASSERT_EQ(write(connection.client_fd, "G", 1), 1);
  usleep(10000);
  EXPECT_FALSE(watch.PeerClosed());
  char byte = 0;
  ASSERT_EQ(recv(connection.server_fd, &byte, 1, MSG_DONTWAIT), 1);
  EXPECT_EQ(byte, 'G');
  close(connection.client_fd);
  connection.client_fd = -1;
  usleep(10000);
  EXPECT_TRUE(watch.PeerClosed());
}

TEST(PeerWatch, UnknownConnectionIsNotFoundAndNeverClosed) {
  PeerWatch watch("127.0.0.1", 1, "127.0.0.1", 2);
  EXPECT_FALSE(watch.found());
  EXPECT_FALSE(watch.PeerClosed());
}

}  // namespace
}  // namespace llmrt::server
