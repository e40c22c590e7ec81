/* Pause container for the registry-free kind path: sleeps until SIGTERM/SIGINT, reaps children. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
static void stop(int sig) { (void)sig; _exit(0); }
static void reap(int sig) { (void)sig; while (waitpid(-1, NULL, WNOHANG) > 0) {} }
int main(void) {
    signal(SIGTERM, stop);
    signal(SIGINT, stop);
    signal(SIGCHLD, reap);
    for (;;) pause();
    return 0;
}
