/* LD_PRELOAD shim that timestamps SQLite's WAL write lock, for bench/run.sh.
 *
 * SQLite (unix VFS, WAL mode) takes the state file's write lock for BEGIN IMMEDIATE as
 * fcntl(F_SETLK, F_WRLCK) on byte 120 of the -shm file (WAL_WRITE_LOCK) and drops it
 * with F_UNLCK on the same byte when the transaction ends. This shim wraps fcntl and
 * appends one line per lock event to $LOCKHOLD_LOG:
 *     <pid> <command> W <ns>   write lock acquired (fcntl returned 0)
 *     <pid> <command> U <ns>   write lock released
 * with CLOCK_MONOTONIC nanoseconds; <command> is the fencepost subcommand (write,
 * claim, release, ...). A write's hold is its last W..U pair (an earlier, short pair
 * is SQLite initialising a fresh -shm at open). Cost: one clock_gettime and one short
 * write(2) per lock event; no ptrace stops, so the process runs at full speed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int log_fd = -2;
static char command[32] = "?";

/* The first argument that names a fencepost subcommand. */
static void find_command(void) {
    static const char *known[] = {"claim", "renew", "complete", "release", "write", "status",
                                  "recover", "run", "log", "verify", NULL};
    char buf[8192];
    int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    for (char *p = buf + strlen(buf) + 1; p < buf + n; p += strlen(p) + 1)
        for (int i = 0; known[i]; i++)
            if (strcmp(p, known[i]) == 0) {
                snprintf(command, sizeof command, "%s", p);
                return;
            }
}

static void note(char kind) {
    if (log_fd == -2) {
        const char *path = getenv("LOCKHOLD_LOG");
        log_fd = path ? open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644) : -1;
        find_command();
    }
    if (log_fd < 0) return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    char line[96];
    int n = snprintf(line, sizeof line, "%ld %s %c %lld\n", (long)getpid(), command, kind,
                     (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    if (n > 0) (void)!write(log_fd, line, (size_t)n);
}

static void check(int cmd, void *arg, int rc) {
    if (rc != 0 || arg == NULL || (cmd != F_SETLK && cmd != F_SETLKW)) return;
    const struct flock *fl = arg;
    if (fl->l_start != 120 || fl->l_len != 1) return;
    if (fl->l_type == F_WRLCK) note('W');
    else if (fl->l_type == F_UNLCK) note('U');
}

int fcntl(int fd, int cmd, ...) {
    static int (*real)(int, int, ...);
    if (!real) real = (int (*)(int, int, ...))dlsym(RTLD_NEXT, "fcntl");
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int rc = real(fd, cmd, arg);
    check(cmd, arg, rc);
    return rc;
}

int fcntl64(int fd, int cmd, ...) {
    static int (*real)(int, int, ...);
    if (!real) real = (int (*)(int, int, ...))dlsym(RTLD_NEXT, "fcntl64");
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int rc = real(fd, cmd, arg);
    check(cmd, arg, rc);
    return rc;
}
