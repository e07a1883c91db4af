/* The physical floor for a durable atomic replace, from a fresh process:
 * stream SRC into a temp file beside DEST, fsync it, rename it over DEST,
 * fsync the folder. Nothing else: no lock, no epoch, no record.
 *
 *   floor DEST [SRC]      (SRC defaults to stdin)
 *
 * Built by bench/run.sh with `gcc -O2`; the fencepost write it is compared with
 * does the same four steps plus the fence (state-file transaction). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void die(const char *what, const char *path) {
    fprintf(stderr, "floor: %s %s: %s\n", what, path, strerror(errno));
    exit(1);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: floor DEST [SRC]\n");
        return 2;
    }
    const char *dest = argv[1];
    int in = 0;
    if (argc == 3 && (in = open(argv[2], O_RDONLY | O_CLOEXEC)) < 0) die("cannot open", argv[2]);

    char dirbuf[4096], basebuf[4096], tmp[8192];
    snprintf(dirbuf, sizeof dirbuf, "%s", dest);
    snprintf(basebuf, sizeof basebuf, "%s", dest);
    const char *dir = dirname(dirbuf);
    const char *base = basename(basebuf);
    snprintf(tmp, sizeof tmp, "%s/.%s.floor-tmp-%ld", dir, base, (long)getpid());

    int out = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) die("cannot create", tmp);
    static char buf[128 * 1024];
    for (;;) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            die("cannot read", argc == 3 ? argv[2] : "stdin");
        }
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0) {
                if (errno == EINTR) continue;
                die("cannot write", tmp);
            }
            off += w;
        }
    }
    if (fsync(out) != 0) die("cannot fsync", tmp);
    if (close(out) != 0) die("cannot close", tmp);
    if (rename(tmp, dest) != 0) die("cannot rename into", dest);
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) die("cannot open folder", dir);
    if (fsync(d) != 0) die("cannot fsync folder", dir);
    close(d);
    return 0;
}
