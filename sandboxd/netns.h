/* netns.h — work done inside another network namespace without moving the calling thread (as
 * root): a short-lived thread joins the namespace, makes a socket (which stays in that namespace
 * for good) or runs a function, and ends. */
#ifndef SANDBOXD_NETNS_H
#define SANDBOXD_NETNS_H

/* A socket (close-on-exec) made in the network namespace netns_fd. -1 with errno. */
int netns_socket(int netns_fd, int domain, int type, int protocol);
/* fn(arg) on a thread inside netns_fd (which may call netns-dependent things: sockets, /proc/sys/net,
 * libnftables); its return value, or -1 with errno when the namespace could not be joined. */
int netns_run(int netns_fd, int (*fn)(void *), void *arg);
#endif
