/* Times one run of a command from a fresh process, with no shell in between:
 * posix_spawn CMD (stdout to /dev/null, stdin and stderr inherited), wait for it,
 * print "NANOSECONDS MINOR_FAULTS EXIT_STATUS" on stdout.
 *
 *   spawntime CMD [ARG...]
 *
 * bench/bench.py runs it once per sample, so its own start-up is never timed: the
 * clock starts just before the spawn and stops when the child has been reaped.
 * Built by bench/run.sh with `gcc -O2`. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

extern char **environ;

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: spawntime CMD [ARG...]\n");
        return 2;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    struct timespec start, end;
    struct rusage usage;
    pid_t pid;
    int status;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int err = posix_spawnp(&pid, argv[1], &actions, NULL, argv + 1, environ);
    if (err) {
        fprintf(stderr, "spawntime: cannot run %s: %s\n", argv[1], strerror(err));
        return 127;
    }
    if (wait4(pid, &status, 0, &usage) < 0) {
        perror("spawntime: wait4");
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &end);
    long long ns = (end.tv_sec - start.tv_sec) * 1000000000LL + (end.tv_nsec - start.tv_nsec);
    printf("%lld %ld %d\n", ns, usage.ru_minflt,
           WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    return 0;
}
