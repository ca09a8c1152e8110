// bb-tunnel: the egress proxy's CONNECT tunnels carried in C.
//
//   bb-tunnel   Started by the egress proxy with a Node IPC channel (NODE_CHANNEL_FD,
//               JSON lines). Each tunnel the proxy allowed arrives as one message with
//               the agent's connection attached as a handle (its fd):
//                 {"cmd":"NODE_HANDLE","type":"net.Native","msg":{"bb":"ID ADDR PORT MS EARLY HOST"}}
//               ADDR is the numeric address the proxy resolved and checked, MS the time
//               allowed to connect, EARLY the bytes the client sent after its CONNECT
//               head and HOST the name it asked for (both hex, "-" when empty).
//               Each handle is acknowledged (NODE_HANDLE_ACK, as Node's protocol wants);
//               then the destination is connected, the client answered `200 Connection
//               Established` (or a 502 when it cannot be reached in time), and bytes carried
//               both ways as bb-relay carries them. When a tunnel ends this sends
//               {"bb":"ID UP DOWN REACHED"}: bytes from the client (EARLY included), bytes
//               to it (the 200 not counted), 1 when it was established. Ends when the
//               channel closes (its proxy went) or with its parent (BB_RELAY_PARENT).
//
// It decides nothing: the proxy parsed, checked, resolved and will log the request.
// This only moves the agent's bytes, as blindly as the relays do, between two sockets
// it was handed; nothing the agent sends reaches the channel. At most 1024 tunnels
// at once: one over that is closed at once and reported as not reached.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "relay.h"

#define MAX_TUNNELS 1024
#define LINE_BYTES (256 * 1024)
#define MAX_FDS 64

static const char ESTABLISHED[] = "HTTP/1.1 200 Connection Established\r\n\r\n";

struct tunnel {
  struct conn c;  // first: epoll's pointer is the tunnel's
  unsigned long id;
  int connecting;
  int reached;
  long long deadline;  // while connecting, monotonic ms
  char host[256];
  struct tunnel *next;  // in the list of tunnels still connecting
  struct tunnel *later, *earlier;  // in the list of every tunnel
};

static int ep, ipc;
static int tunnels;
static struct tunnel *connecting;
static struct tunnel *every;
static volatile sig_atomic_t stopping;
static char line[LINE_BYTES];
static size_t line_len;
static int fds[MAX_FDS];  // handles received, waiting for their message
static int nfds;
static int ipc_mark;
#define SKIP ((void *)-1)

static long long now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/** Write all of it to the proxy, waiting while the channel is full; gone, this ends. */
static void say(const char *s, size_t n) {
  while (n > 0) {
    ssize_t w = write(ipc, s, n);
    if (w > 0) {
      s += w;
      n -= (size_t)w;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      struct pollfd p = {.fd = ipc, .events = POLLOUT};
      poll(&p, 1, -1);
    } else {
      exit(0);  // the proxy is gone: so are the tunnels it handed over
    }
  }
}

/** A tunnel that never started: said so, so the proxy gives its log room back. */
static void never(unsigned long id) {
  char msg[64];
  int n = snprintf(msg, sizeof msg, "{\"bb\":\"%lu 0 0 0\"}\n", id);
  say(msg, (size_t)n);
}

static void unlist(struct tunnel *t) {
  for (struct tunnel **p = &connecting; *p; p = &(*p)->next)
    if (*p == t) {
      *p = t->next;
      return;
    }
}

static void end_tunnel(struct tunnel *t) {
  char msg[128];
  size_t down = t->c.sent[1];
  size_t greeting = sizeof ESTABLISHED - 1;
  down = t->reached ? (down > greeting ? down - greeting : 0) : 0;
  int n = snprintf(msg, sizeof msg, "{\"bb\":\"%lu %zu %zu %d\"}\n", t->id, t->c.sent[0], down,
                   t->reached);
  if (t->connecting) unlist(t);
  if (t->earlier) t->earlier->later = t->later;
  else every = t->later;
  if (t->later) t->later->earlier = t->earlier;
  for (int i = 0; i < 2; i++) {
    if (t->c.fd[i] >= 0) {
      // Taken out of the epoll set by hand: the client's fd came from the proxy, whose
      // copy may still be open, and epoll forgets a socket only when every fd is closed.
      epoll_ctl(ep, EPOLL_CTL_DEL, t->c.fd[i], NULL);
      close(t->c.fd[i]);
    }
    free(t->c.half[i].buf);
  }
  free(t);
  tunnels--;
  say(msg, (size_t)n);
}

/** The destination could not be reached: say so to the client, then end. */
static void unreachable(struct tunnel *t) {
  char answer[512];
  const char *why = "cannot reach ";
  int body = (int)(strlen(why) + strlen(t->host) + 1);
  int n = snprintf(answer, sizeof answer,
                   "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\n"
                   "content-length: %d\r\nconnection: close\r\n\r\n%s%s\n",
                   body, why, t->host);
  if (n > 0 && (size_t)n < sizeof answer) send(t->c.fd[0], answer, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
  t->c.sent[0] = 0;  // nothing of the client's went anywhere
  end_tunnel(t);
}

static int unhex(const char *s, char *out, size_t max, size_t *len) {
  *len = 0;
  if (strcmp(s, "-") == 0) return 0;
  size_t n = strlen(s);
  if (n % 2 || n / 2 > max) return -1;
  for (size_t i = 0; i < n; i += 2) {
    unsigned v;
    if (sscanf(s + i, "%2x", &v) != 1) return -1;
    out[(*len)++] = (char)v;
  }
  return 0;
}

/** Start the tunnel a message describes on the client `fd`: connect, then carry. */
static void start(int fd, char *fields) {
  char *save = NULL;
  char *id_s = strtok_r(fields, " ", &save), *addr = strtok_r(NULL, " ", &save),
       *port_s = strtok_r(NULL, " ", &save), *ms_s = strtok_r(NULL, " ", &save),
       *early_s = strtok_r(NULL, " ", &save), *host_s = strtok_r(NULL, " ", &save);
  unsigned long id = id_s ? strtoul(id_s, NULL, 10) : 0;
  if (!host_s) {
    close(fd);
    if (id) never(id);
    return;
  }
  struct tunnel *t = calloc(1, sizeof *t);
  char *a = malloc(BUF), *b = malloc(BUF);
  if (!t || !a || !b) {
    free(t), free(a), free(b), close(fd);
    never(id);
    return;
  }
  t->id = id;
  t->c.fd[0] = fd;
  t->c.fd[1] = -1;
  t->c.half[0].buf = a;
  t->c.half[1].buf = b;
  t->later = every;
  if (every) every->earlier = t;
  every = t;
  tunnels++;
  size_t host_len = 0;
  long port = strtol(port_s, NULL, 10);
  if (tunnels > MAX_TUNNELS || port < 1 || port > 65535 ||
      unhex(early_s, a, BUF, &t->c.half[0].len) < 0 ||
      unhex(host_s, t->host, sizeof t->host - 1, &host_len) < 0) {
    end_tunnel(t);
    return;
  }
  t->host[host_len] = 0;
  memcpy(b, ESTABLISHED, sizeof ESTABLISHED - 1);
  t->c.half[1].len = sizeof ESTABLISHED - 1;
  struct sockaddr_storage to = {0};
  socklen_t to_len = 0;
  struct sockaddr_in *v4 = (struct sockaddr_in *)&to;
  struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&to;
  if (inet_pton(AF_INET, addr, &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons((unsigned short)port);
    to_len = sizeof *v4;
  } else if (inet_pton(AF_INET6, addr, &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons((unsigned short)port);
    to_len = sizeof *v6;
  } else {
    unreachable(t);
    return;
  }
  int up = socket(to.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int r = up < 0 ? -1 : connect(up, (struct sockaddr *)&to, to_len);
  t->c.fd[1] = up;
  if (up < 0 || (r < 0 && errno != EINPROGRESS)) {
    unreachable(t);
    return;
  }
  int one = 1;
  setsockopt(up, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  for (int i = 0; i < 2; i++) {
    struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET, .data.ptr = t};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, t->c.fd[i], &e) < 0) {
      end_tunnel(t);
      return;
    }
  }
  long ms = strtol(ms_s, NULL, 10);
  t->deadline = now_ms() + (ms > 0 ? ms : 10000);
  t->connecting = 1;
  t->next = connecting;
  connecting = t;
}

/** A tunnel's sockets said something: finish connecting, or carry what can move. */
static void serve_tunnel(struct tunnel *t, uint32_t ev) {
  int err = 0;
  socklen_t el = sizeof err;
  if (t->connecting) {
    getsockopt(t->c.fd[1], SOL_SOCKET, SO_ERROR, &err, &el);
    if (err) return unreachable(t);
    struct sockaddr_storage peer;
    socklen_t pl = sizeof peer;
    if (getpeername(t->c.fd[1], (struct sockaddr *)&peer, &pl) < 0) return;  // not yet
    t->connecting = 0;
    t->reached = 1;
    unlist(t);
  } else if (ev & EPOLLERR) {
    getsockopt(t->c.fd[0], SOL_SOCKET, SO_ERROR, &err, &el);
  }
  if (err || serve(&t->c) < 0) end_tunnel(t);
}

/** Read what the proxy sent: handles (kept in order) and lines, each acted on. */
static void read_channel(void) {
  for (;;) {
    if (line_len == sizeof line) exit(1);  // no line is this long: not the protocol
    union {
      char buf[CMSG_SPACE(sizeof(int) * MAX_FDS)];
      struct cmsghdr align;
    } control;
    struct iovec io = {.iov_base = line + line_len, .iov_len = sizeof line - line_len};
    struct msghdr m = {.msg_iov = &io, .msg_iovlen = 1, .msg_control = control.buf,
                       .msg_controllen = sizeof control.buf};
    ssize_t n = recvmsg(ipc, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) exit(0);  // the proxy closed the channel
    if (m.msg_flags & MSG_CTRUNC) exit(1);  // handles lost: fds and messages no longer pair
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int i = 0; i < k; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (nfds < MAX_FDS) fds[nfds++] = fd;
        else close(fd);
      }
    }
    line_len += (size_t)n;
    char *from = line, *nl;
    while ((nl = memchr(from, '\n', (size_t)(line + line_len - from)))) {
      *nl = 0;
      if (strstr(from, "\"cmd\":\"NODE_HANDLE\"")) {
        int fd = -1;
        if (nfds > 0) {
          fd = fds[0];
          memmove(fds, fds + 1, (size_t)--nfds * sizeof(int));
        }
        static const char ack[] = "{\"cmd\":\"NODE_HANDLE_ACK\"}\n";
        say(ack, sizeof ack - 1);
        char *f = strstr(from, "\"bb\":\"");
        char *q = f ? strchr(f + 6, '"') : NULL;
        if (q && fd >= 0) {
          *q = 0;
          start(fd, f + 6);
        } else {
          // A message without its handle (or the other way round): nothing to carry.
          if (fd >= 0) close(fd);
          if (q) never(strtoul(f + 6, NULL, 10));
        }
      }
      from = nl + 1;
    }
    line_len = (size_t)(line + line_len - from);
    memmove(line, from, line_len);
  }
}

static void stop(int sig) {
  (void)sig;
  stopping = 1;
}

int main(void) {
  const char *channel = getenv("NODE_CHANNEL_FD");
  if (!channel) {
    fprintf(stderr, "bb-tunnel: started without NODE_CHANNEL_FD: the egress proxy starts it\n");
    return 2;
  }
  ipc = atoi(channel);
  if (!relay_setup()) return 0;
  // Asked to stop (its proxy closes), every tunnel ends and says what it carried.
  struct sigaction sa = {.sa_handler = stop};
  sigaction(SIGTERM, &sa, NULL);
  // SIGTERM is taken only while waiting (epoll_pwait): it is never missed between a
  // check of `stopping` and the wait.
  sigset_t term, waiting;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  sigprocmask(SIG_BLOCK, &term, &waiting);
  sigdelset(&waiting, SIGTERM);
  fcntl(ipc, F_SETFD, FD_CLOEXEC);
  fcntl(ipc, F_SETFL, fcntl(ipc, F_GETFL) | O_NONBLOCK);
  ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event ie = {.events = EPOLLIN, .data.ptr = &ipc_mark};
  if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, ipc, &ie) < 0) {
    fprintf(stderr, "bb-tunnel: epoll: %s\n", strerror(errno));
    return 4;
  }
  struct epoll_event events[64];
  for (;;) {
    int n = epoll_pwait(ep, events, 64, connecting ? 100 : -1, &waiting);
    if (stopping) {
      while (every) end_tunnel(every);
      return 0;
    }
    if (n < 0 && errno != EINTR) return 6;
    for (int k = 0; k < n; k++) {
      void *p = events[k].data.ptr;
      if (p == SKIP) continue;
      if (p == &ipc_mark) {
        read_channel();
        continue;
      }
      // Its two fds share the pointer: served once per batch, and never after it ended.
      uint32_t ev = events[k].events;
      for (int j = k + 1; j < n; j++)
        if (events[j].data.ptr == p) ev |= events[j].events, events[j].data.ptr = SKIP;
      serve_tunnel(p, ev);
    }
    long long now = now_ms();
    for (struct tunnel *t = connecting, *next; t; t = next) {
      next = t->next;
      if (now >= t->deadline) unreachable(t);
    }
  }
}
