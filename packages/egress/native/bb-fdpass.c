// bb-fdpass: hands an agent's TCP connections to its bottle's gate, so that the
// gate serves them itself and one process, not two, stands between the agent and
// the network. Node cannot receive a descriptor on a socket it accepted; this
// small program does that part. See docs in packages/egress/README.md.
//
//   bb-fdpass listen PORT SOCKET   In the bottle. Connect to the gate's handoff
//       socket SOCKET, listen on 127.0.0.1:PORT, write "ready\n" on stdout, then
//       send each accepted connection to the gate (one byte, one descriptor per
//       message). Exits 3 when SOCKET cannot be reached, 4 when PORT cannot be
//       listened on, 5 when the gate goes and cannot be reached again, 6 when
//       accepting fails for good; whoever
//       started it serves the port itself then. Ends with its parent.
//
//   bb-fdpass recv                 In the gate. Read what a bottle hands over on
//       fd 0. Take at most one descriptor per message; pass on only a connected
//       TCP socket, each to the gate's Node process as a handle on its IPC
//       channel (fd 3, NODE_CHANNEL_FD) and only once the one before it was
//       acknowledged; close anything else. What is on fd 0 is the agent's: it
//       may send anything, so nothing it sends is trusted or kept. Ends when fd 0
//       ends, or on a message with more than one descriptor.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CHANNEL 3
static const char HANDLE_MSG[] = "{\"cmd\":\"NODE_HANDLE\",\"type\":\"net.Socket\",\"msg\":\"bb-fdpass\"}\n";

static void pause_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) < 0 && errno == EINTR) {
  }
}

/** Send `len` bytes with one descriptor attached; 0 when all went. */
static int send_fd(int sock, int fd, const char *msg, size_t len) {
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  memset(&u, 0, sizeof u);
  struct iovec iov = {(void *)msg, len};
  struct msghdr mh = {0};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = u.buf;
  mh.msg_controllen = sizeof u.buf;
  struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  for (;;) {
    ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL);
    if (n >= 0) {
      if ((size_t)n == len) return 0;
      // The descriptor went with the first byte; the rest goes plainly.
      const char *rest = msg + n;
      size_t left = len - (size_t)n;
      while (left > 0) {
        ssize_t w = send(sock, rest, left, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        rest += w;
        left -= (size_t)w;
      }
      return 0;
    }
    if (errno != EINTR) return -1;
  }
}

/** Blocking I/O on `fd`: this program waits on one thing at a time. */
static void blocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0 && (flags & O_NONBLOCK)) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
}

static int connect_unix(const char *path) {
  struct sockaddr_un a = {0};
  if (strlen(path) >= sizeof a.sun_path) return -1;
  a.sun_family = AF_UNIX;
  strcpy(a.sun_path, path);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  if (connect(s, (struct sockaddr *)&a, sizeof a) < 0) {
    close(s);
    return -1;
  }
  return s;
}

static int run_listen(const char *port_text, const char *path) {
  char *end = NULL;
  long port = strtol(port_text, &end, 10);
  if (!end || *end || port < 1 || port > 65535) {
    fprintf(stderr, "bb-fdpass: port %s must be 1 to 65535\n", port_text);
    return 2;
  }
  // It serves its parent (the bridge) and no one else: it goes when the parent goes.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  signal(SIGPIPE, SIG_IGN);
  int gate = connect_unix(path);
  if (gate < 0) {
    fprintf(stderr, "bb-fdpass: cannot reach the gate at %s: %s\n", path, strerror(errno));
    return 3;
  }
  int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 511) < 0) {
    fprintf(stderr, "bb-fdpass: cannot listen on 127.0.0.1:%ld: %s\n", port, strerror(errno));
    return 4;
  }
  if (write(1, "ready\n", 6) != 6) return 4;
  for (;;) {
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        pause_ms(50);
        continue;
      }
      fprintf(stderr, "bb-fdpass: cannot accept on 127.0.0.1:%ld: %s\n", port, strerror(errno));
      return 6;
    }
    // A gate that went (restarted, say) is reached again, a few times.
    int tries = 0;
    while (send_fd(gate, c, "C", 1) < 0) {
      close(gate);
      gate = -1;
      while (gate < 0 && tries++ < 20) {
        pause_ms(50);
        gate = connect_unix(path);
      }
      if (gate < 0) {
        fprintf(stderr, "bb-fdpass: the gate at %s is gone\n", path);
        close(c);
        return 5;
      }
    }
    close(c);
  }
}

/** A connected TCP socket, and nothing else. */
static int is_tcp_connection(int fd) {
  int v = 0;
  socklen_t n = sizeof v;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &n) < 0 || v != SOCK_STREAM) return 0;
  n = sizeof v;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &n) < 0 || (v != AF_INET && v != AF_INET6)) return 0;
  n = sizeof v;
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &n) < 0 || v != IPPROTO_TCP) return 0;
  struct sockaddr_storage peer;
  socklen_t pn = sizeof peer;
  return getpeername(fd, (struct sockaddr *)&peer, &pn) == 0;
}

/** Read the channel until a whole line (Node's acknowledgement) came; 0 when it did. */
static int await_ack(void) {
  char b[256];
  for (;;) {
    ssize_t n = read(CHANNEL, b, sizeof b);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    if (memchr(b, '\n', (size_t)n)) return 0;
  }
}

static int run_recv(void) {
  signal(SIGPIPE, SIG_IGN);
  blocking(0);
  blocking(CHANNEL);
  for (;;) {
    char data[512];
    union {
      struct cmsghdr h;
      char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct iovec iov = {data, sizeof data};
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof u.buf;
    ssize_t n = recvmsg(0, &mh, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    // One descriptor per message, as a bridge sends. The buffer has room for two
    // (alignment): more than one, or more than fit (the kernel closed those), is
    // not a bridge, and what came is closed with the channel.
    int fds[2];
    size_t got = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; i++) {
        int one;
        memcpy(&one, CMSG_DATA(c) + i * sizeof(int), sizeof one);
        if (got < 2) fds[got++] = one;
        else close(one);
      }
    }
    if (got > 1 || (mh.msg_flags & MSG_CTRUNC)) {
      for (size_t i = 0; i < got; i++) close(fds[i]);
      return 2;
    }
    int fd = got == 1 ? fds[0] : -1;
    if (fd < 0) continue;
    if (!is_tcp_connection(fd)) {
      close(fd);
      continue;
    }
    int sent = send_fd(CHANNEL, fd, HANDLE_MSG, sizeof HANDLE_MSG - 1);
    close(fd);
    if (sent < 0 || await_ack() < 0) return 1;
  }
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "listen") == 0) return run_listen(argv[2], argv[3]);
  if (argc == 2 && strcmp(argv[1], "recv") == 0) return run_recv();
  fprintf(stderr, "usage: bb-fdpass listen PORT SOCKET | bb-fdpass recv\n");
  return 2;
}
