/* The distinct cache lines a server touches per window of its loop, from valgrind's
 * `--tool=lackey --trace-mem=yes --trace-syscalls=yes` log on stdin (scripts/hot_lines.py).
 *
 *   hot_lines WINDOW_ENTERS WINDOWS CTL_DIR DUMP_WINDOW
 *
 * Skips everything until the file CTL_DIR/arm exists (checked every 2^20 log lines), then
 * counts, from one io_uring_enter(2) call (syscall 426 on x86-64) to the WINDOW_ENTERS-th
 * after it, the distinct 64-byte lines of instruction fetches (lackey "I") and of data
 * loads, stores and modifies ("L", "S", "M"), by start address. Prints per window
 *   W <index> I <instruction lines> D <data lines> accesses <trace records>
 * and writes window DUMP_WINDOW's lines to CTL_DIR/lines ("<0 I|1 D> <address hex>").
 * Before the first window and after the last it creates CTL_DIR/pause.<0|1> and waits
 * for CTL_DIR/go.<0|1>: meanwhile valgrind blocks on the full pipe, so the server stands
 * still while the caller reads its sockets' byte counts (requests a window). After the
 * last window it reads the rest of the log unprocessed, so the server keeps running.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define HBITS 22
#define HSIZE (1u << HBITS)
#define LIVE ((uint64_t)1 << 63)

static uint64_t *table;     /* open addressing: LIVE | line << 1 | kind */
static uint32_t *used, nused;
static uint64_t counts[2];  /* distinct lines: [0] instruction, [1] data */

static void add(uint64_t line, int kind)
{
    uint64_t key = LIVE | line << 1 | (uint64_t)kind;
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - HBITS));
    while (table[h]) {
        if (table[h] == key)
            return;
        h = (h + 1) & (HSIZE - 1);
    }
    if (nused >= HSIZE / 2) {
        fprintf(stderr, "hot_lines: more than %u lines in a window\n", HSIZE / 2);
        exit(2);
    }
    table[h] = key;
    used[nused++] = h;
    counts[kind]++;
}

static void wait_go(const char *dir, int n)
{
    char path[4096];
    struct stat st;
    struct timespec ts = {0, 20 * 1000 * 1000};
    snprintf(path, sizeof path, "%s/pause.%d", dir, n);
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    snprintf(path, sizeof path, "%s/go.%d", dir, n);
    while (stat(path, &st) != 0)
        nanosleep(&ts, NULL);
}

static void dump(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/lines", dir);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    for (uint32_t i = 0; i < nused; i++) {
        uint64_t key = table[used[i]] & ~LIVE;
        fprintf(f, "%d %llx\n", (int)(key & 1), (unsigned long long)((key >> 1) << 6));
    }
    fclose(f);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: hot_lines WINDOW_ENTERS WINDOWS CTL_DIR DUMP_WINDOW\n");
        return 2;
    }
    int per = atoi(argv[1]), windows = atoi(argv[2]), dump_at = atoi(argv[4]);
    const char *dir = argv[3];
    char arm[4096], buf[8192];
    snprintf(arm, sizeof arm, "%s/arm", dir);
    table = calloc(HSIZE, sizeof *table);
    used = malloc(HSIZE * sizeof *used);
    long long n = 0, records = 0;
    int armed = 0, open_ = 0, enters = 0, win = 0;
    struct stat st;
    while (fgets(buf, sizeof buf, stdin)) {
        n++;
        if (!armed) {
            if ((n & 0xFFFFF) == 0 && stat(arm, &st) == 0)
                armed = 1;
            continue;
        }
        if (buf[0] == 'S' && !strncmp(buf, "SYSCALL[", 8)) {
            /* the call's own line, "SYSCALL[pid,tid](426) sys_io_uring_enter ( ...", not
             * the "SYSCALL[pid,tid](426) ... [async] --> ..." line of a blocking call's end */
            char *p = strchr(buf, '(');
            if (!p || strncmp(p, "(426) sys", 9))
                continue;
            if (!open_) {
                wait_go(dir, 0);
                open_ = 1;
                enters = 0;
                continue;
            }
            if (++enters < per)
                continue;
            printf("W %d I %llu D %llu accesses %lld\n", win, (unsigned long long)counts[0],
                   (unsigned long long)counts[1], records);
            fflush(stdout);
            if (win == dump_at)
                dump(dir);
            for (uint32_t i = 0; i < nused; i++)
                table[used[i]] = 0;
            nused = 0;
            counts[0] = counts[1] = 0;
            records = 0;
            enters = 0;
            if (++win >= windows) {
                wait_go(dir, 1);
                while (fgets(buf, sizeof buf, stdin))
                    ;
                return 0;
            }
            continue;
        }
        if (!open_)
            continue;
        int kind;
        if (buf[0] == 'I' && buf[1] == ' ')
            kind = 0;
        else if (buf[0] == ' ' && (buf[1] == 'L' || buf[1] == 'S' || buf[1] == 'M'))
            kind = 1;
        else
            continue;
        add(strtoull(buf + 3, NULL, 16) >> 6, kind);
        records++;
    }
    return 0;
}
