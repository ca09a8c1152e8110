// bb-relay: a bottle's port on 127.0.0.1 carried to its gate's Unix socket, in C.
//
//   bb-relay PORT SOCKET   Listen on 127.0.0.1:PORT, write "ready\n" on stdout, then
//                          carry each connection's bytes both ways to a new
//                          connection to SOCKET. Exits 2 on bad arguments, 4 when
//                          PORT cannot be listened on, 6 when accepting fails for
//                          good; whoever started it serves the port itself then.
//                          Ends with its parent (BB_RELAY_PARENT: the pid it must
//                          have, or it ends at once).
//
// What the Node bridge does, at less cost per request: one thread, epoll, no
// allocation but a connection's two buffers. It runs in the bottle, as the
// agent, and holds nothing the agent does not: the gate trusts nothing it carries.
// A side that ends its writing (FIN) is passed on once its bytes are written. A
// client that fails ends the connection; a gate that stops reading still has its
// answer carried to the client (a refusal sent before it closed, say). At most
// 1024 connections at once: more wait in the listener's backlog.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "relay.h"

#define MAX_CONNS 1024

static int ep;
static int conns;
static int listener;
static int listening = 1;  // the listener is in the epoll set
#ifdef BB_RELAY_FLOOR
// Built so (-DBB_RELAY_FLOOR) only by the egress benchmark: the same relay the other
// way round, from a Unix socket to 127.0.0.1:PORT (`bb-relay-floor SOCKET PORT`),
// the blind hop its floor puts where the proxy is. Never shipped. With
// -DBB_RELAY_FLOOR_CONNECT too, it first reads a request head and answers it `200
// Connection Established`, checking nothing: the floor of any CONNECT proxy.
static struct sockaddr_in target;
#else
static struct sockaddr_un target;
#endif
#define SKIP ((void *)-1)

static void pause_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&t, &t) < 0 && errno == EINTR) {
  }
}

/** Take the listener out of the epoll set (clients wait in its backlog), or put it back. */
static void listen_for(int on) {
  if (on == listening) return;
  struct epoll_event e = {.events = on ? EPOLLIN : 0, .data.ptr = NULL};
  if (epoll_ctl(ep, EPOLL_CTL_MOD, listener, &e) == 0) listening = on;
}

static void drop(struct conn *c) {
  for (int i = 0; i < 2; i++) {
    close(c->fd[i]);  // also leaves the epoll set
    free(c->half[i].buf);
  }
  free(c);
  conns--;
  listen_for(1);
}

static void open_conn(int client) {
  if (conns >= MAX_CONNS) {
    close(client);
    return;
  }
#ifdef BB_RELAY_FLOOR_CONNECT
  // The head read at once (the client's socket still blocks), then answered.
  static const char established[] = "HTTP/1.1 200 Connection Established\r\n\r\n";
  char head[BUF];
  size_t got = 0;
  char *end = NULL;
  while (!end) {
    ssize_t n = got < sizeof head ? recv(client, head + got, sizeof head - got, 0) : -1;
    if (n <= 0) {
      close(client);
      return;
    }
    got += (size_t)n;
    end = memmem(head, got, "\r\n\r\n", 4);
  }
  size_t early = got - (size_t)(end + 4 - head);
  if (send(client, established, sizeof established - 1, MSG_NOSIGNAL) < 0) {
    close(client);
    return;
  }
#endif
#ifdef BB_RELAY_FLOOR
  int gate = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);  // loopback: connected at once
#else
  int gate = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);  // never wait on a full backlog
#endif
  if (gate < 0 || connect(gate, (struct sockaddr *)&target, sizeof target) < 0) {
    if (gate >= 0) close(gate);
    close(client);
    return;
  }
  int one = 1;
#ifdef BB_RELAY_FLOOR
  setsockopt(gate, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
#else
  setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // bytes go out as they come
#endif
  struct conn *c = calloc(1, sizeof *c);
  char *a = malloc(BUF), *b = malloc(BUF);
  int ok = c && a && b;
  for (int i = 0; ok && i < 2; i++) {
    int fd = i == 0 ? client : gate;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = c};
    ok = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) == 0;
  }
  if (!ok) {
    close(client);  // leaves the epoll set with it
    close(gate);
    free(a);
    free(b);
    free(c);
    return;
  }
  c->fd[0] = client;
  c->fd[1] = gate;
  c->half[0].buf = a;
  c->half[1].buf = b;
#ifdef BB_RELAY_FLOOR_CONNECT
  memcpy(a, end + 4, early);
  c->half[0].len = early;
#endif
  conns++;
  if (serve(c) < 0) drop(c);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: bb-relay PORT SOCKET\n");
    return 2;
  }
#ifdef BB_RELAY_FLOOR
  const char *port_arg = argv[2], *path_arg = argv[1];
#else
  const char *port_arg = argv[1], *path_arg = argv[2];
#endif
  char *end = NULL;
  long port = strtol(port_arg, &end, 10);
  if (port_arg[0] < '0' || port_arg[0] > '9' || !end || *end || port < 1 || port > 65535) {
    fprintf(stderr, "bb-relay: port %s must be 1 to 65535\n", port_arg);
    return 2;
  }
  struct sockaddr_un path = {0};
  if (strlen(path_arg) >= sizeof path.sun_path) {
    fprintf(stderr, "bb-relay: socket path %s is too long\n", path_arg);
    return 2;
  }
  path.sun_family = AF_UNIX;
  strcpy(path.sun_path, path_arg);
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_port = htons((unsigned short)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
#ifdef BB_RELAY_FLOOR
  target = a;
#else
  target = path;
#endif
  // Started by a bridge (BB_RELAY_PARENT names it), it serves that parent and goes
  // with it. Started on its own (a bottle's shell, which leaves it to the container's
  // init), it lives as long as the container.
  if (!relay_setup()) return 0;
#ifdef BB_RELAY_FLOOR
  int l = listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l < 0 || bind(l, (struct sockaddr *)&path, sizeof path) < 0 || listen(l, 511) < 0) {
#else
  int one = 1;
  int l = listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
      bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 511) < 0) {
#endif
    fprintf(stderr, "bb-relay: cannot listen on 127.0.0.1:%ld: %s\n", port, strerror(errno));
    return 4;
  }
  ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event le = {.events = EPOLLIN, .data.ptr = NULL};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, l, &le) < 0) {
    fprintf(stderr, "bb-relay: epoll: %s\n", strerror(errno));
    return 4;
  }
  if (write(1, "ready\n", 6) != 6) return 4;
  struct epoll_event events[64];
  for (;;) {
    int n = epoll_wait(ep, events, 64, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      return 6;
    }
    for (int k = 0; k < n; k++) {
      struct conn *c = events[k].data.ptr;
      if (c == SKIP) continue;
      if (c) {
        // Its two fds share the pointer: served once per batch, and never after a drop.
        uint32_t ev = events[k].events;
        for (int j = k + 1; j < n; j++)
          if (events[j].data.ptr == c) ev |= events[j].events, events[j].data.ptr = SKIP;
        int err = 0;
        socklen_t el = sizeof err;
        if (ev & EPOLLERR) getsockopt(c->fd[0], SOL_SOCKET, SO_ERROR, &err, &el);
        if (err || serve(c) < 0) drop(c);
        continue;
      }
      for (;;) {
        // At the limit, clients wait in the backlog until a connection ends.
        if (conns >= MAX_CONNS) {
          listen_for(0);
          break;
        }
        int s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
        if (s >= 0) {
          open_conn(s);
          continue;
        }
        if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of fds or memory: wait for a connection to end, or a moment when none can.
          if (conns > 0) listen_for(0);
          else pause_ms(50);
          break;
        }
        fprintf(stderr, "bb-relay: cannot accept on 127.0.0.1:%ld: %s\n", port, strerror(errno));
        return 6;
      }
    }
  }
}
