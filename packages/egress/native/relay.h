// relay.h: the byte carrying shared by bb-relay and bb-tunnel: one connection's two
// sockets, a buffer each way, moved edge-triggered until nothing can move.
#ifndef BB_RELAY_H
#define BB_RELAY_H
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#define BUF (64 * 1024)

/** One direction: bytes read from `from`, waiting to be written to the other side. */
struct half {
  char *buf;
  size_t len, off;
  int eof;   // `from` ended its writing
  int shut;  // and that end was passed on
};

/**
 * A connection: fd[0] the client, fd[1] its far side (the gate's socket for bb-relay,
 * the destination for bb-tunnel); half[i] carries fd[i] to fd[1 - i].
 */
struct conn {
  int fd[2];
  struct half half[2];
  size_t sent[2];  // bytes written to fd[1 - i] from half[i]
};

/**
 * Move what can move now, both ways, until nothing can (every read and write
 * would block: edge-triggered, a later event brings the rest). 0 while the
 * connection goes on, -1 when it is over or failed.
 */
static inline int serve(struct conn *c) {
  for (int moved = 1; moved;) {
    moved = 0;
    for (int i = 0; i < 2; i++) {
      struct half *h = &c->half[i];
      while (h->len > 0) {
        ssize_t w = send(c->fd[1 - i], h->buf + h->off, h->len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (w < 0) {
          if (i == 1) return -1;  // the client is gone: nothing more can reach it
          // The far side stopped reading: what the client still sends is dropped, but
          // what it said (e.g. the gate's 403 before it closed) still goes out.
          h->len = 0, h->eof = 1, h->shut = 1;
          moved = 1;
          break;
        }
        c->sent[i] += (size_t)w;
        h->off += (size_t)w;
        h->len -= (size_t)w;
        moved = 1;
      }
      if (h->len == 0) h->off = 0;
      if (h->len == 0 && h->eof && !h->shut) {
        shutdown(c->fd[1 - i], SHUT_WR);
        h->shut = 1;
      }
      if (h->len == 0 && !h->eof) {
        ssize_t n = recv(c->fd[i], h->buf, BUF, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR) n = recv(c->fd[i], h->buf, BUF, MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
          if (i == 0) return -1;
          n = 0;  // the far side reset (closed with unread bytes): its bytes were read, it ended
        }
        if (n == 0) h->eof = 1;
        if (n > 0) h->len = (size_t)n;
        if (n >= 0) moved = 1;
      }
    }
  }
  // Both ends passed on: nothing more can come either way.
  return c->half[0].shut && c->half[1].shut ? -1 : 0;
}

/**
 * What both programs do first. Started by a parent that names itself
 * (BB_RELAY_PARENT), it goes with that parent, even when the parent went before this
 * could be asked: 0 then, and the program ends. Two fds per connection: as many as
 * the hard limit allows. A peer gone while written to is an error, not a signal.
 */
static inline int relay_setup(void) {
  const char *parent = getenv("BB_RELAY_PARENT");
  if (parent) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (atol(parent) != (long)getppid()) return 0;
  }
  struct rlimit nofile;
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  signal(SIGPIPE, SIG_IGN);
  return 1;
}
#endif
