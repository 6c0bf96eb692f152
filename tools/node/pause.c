/* The node's Pod sandbox process: holds a Pod's namespaces open, reaps the orphans that
 * land on it as PID 1 and exits on SIGINT or SIGTERM. Written for kubosh's dev node, whose
 * containerd cannot pull registry.k8s.io/pause; built static by tools/node/images.sh. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signal) { _exit(128 + signal); }

static void reap(int signal) {
  (void)signal;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction on_stop = {.sa_handler = stop};
  struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
  sigaction(SIGINT, &on_stop, NULL);
  sigaction(SIGTERM, &on_stop, NULL);
  sigaction(SIGCHLD, &on_child, NULL);
  for (;;) pause();
  return EXIT_FAILURE;
}
