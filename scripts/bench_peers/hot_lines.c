/* The distinct cache lines a server touches per window of its loop, from valgrind's
 * `--tool=lackey --trace-mem=yes --trace-syscalls=yes` log on stdin (scripts/hot_lines.py).
 *
 *   hot_lines WINDOW_ENTERS WINDOWS CTL_DIR
 *
 * Skips everything until the file CTL_DIR/arm exists (checked every 2^20 log lines), then
 * counts, from one io_uring_enter(2) call (syscall 426 on x86-64) to the WINDOW_ENTERS-th
 * after it, the distinct 64-byte lines of instruction fetches (lackey "I") and of data
 * loads, stores and modifies ("L", "S", "M"), by start address, and of those the lines the
 * window before touched too (what the loop takes back on every turn; the others are new
 * to it, such as text written once). Prints per window
 *   W <index> I <lines> D <lines> RI <recurring I lines> RD <recurring D lines> accesses <records>
 * and writes each window's lines to CTL_DIR/lines.<index> ("<0 I|1 D> <address hex> <1 if
 * recurring else 0>"; window 0 has no window before it, so none of its lines recur).
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

/* two sets of lines, open addressing: this window's and the one before (LIVE | line << 1
 * | kind); used[] lists a set's filled slots, so clearing it costs what it holds */
struct set {
    uint64_t *table;
    uint32_t *used, n;
};
static struct set cur, prev;
static uint64_t counts[2];  /* distinct lines: [0] instruction, [1] data */

static uint32_t slot(const struct set *s, uint64_t key)
{
    uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> (64 - HBITS));
    while (s->table[h] && s->table[h] != key)
        h = (h + 1) & (HSIZE - 1);
    return h;
}

static void clear(struct set *s)
{
    for (uint32_t i = 0; i < s->n; i++)
        s->table[s->used[i]] = 0;
    s->n = 0;
}

static void add(uint64_t line, int kind)
{
    uint64_t key = LIVE | line << 1 | (uint64_t)kind;
    uint32_t h = slot(&cur, key);
    if (cur.table[h])
        return;
    if (cur.n >= HSIZE / 2) {
        fprintf(stderr, "hot_lines: more than %u lines in a window\n", HSIZE / 2);
        exit(2);
    }
    cur.table[h] = key;
    cur.used[cur.n++] = h;
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

/* Ends window `win`: prints its counts, writes its lines, and makes it the window before. */
static void end_window(const char *dir, int win, long long records)
{
    char path[4096];
    uint64_t recur[2] = {0, 0};
    snprintf(path, sizeof path, "%s/lines.%d", dir, win);
    FILE *f = fopen(path, "w");
    for (uint32_t i = 0; i < cur.n; i++) {
        uint64_t key = cur.table[cur.used[i]];
        int kind = (int)(key & 1), r = prev.table[slot(&prev, key)] != 0;
        recur[kind] += r;
        if (f)
            fprintf(f, "%d %llx %d\n", kind, (unsigned long long)(((key & ~LIVE) >> 1) << 6), r);
    }
    if (f)
        fclose(f);
    printf("W %d I %llu D %llu RI %llu RD %llu accesses %lld\n", win, (unsigned long long)counts[0],
           (unsigned long long)counts[1], (unsigned long long)recur[0], (unsigned long long)recur[1], records);
    fflush(stdout);
    clear(&prev);
    for (uint32_t i = 0; i < cur.n; i++) {
        uint64_t key = cur.table[cur.used[i]];
        uint32_t h = slot(&prev, key);
        prev.table[h] = key;
        prev.used[prev.n++] = h;
    }
    clear(&cur);
    counts[0] = counts[1] = 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: hot_lines WINDOW_ENTERS WINDOWS CTL_DIR\n");
        return 2;
    }
    int per = atoi(argv[1]), windows = atoi(argv[2]);
    const char *dir = argv[3];
    char arm[4096], buf[8192];
    snprintf(arm, sizeof arm, "%s/arm", dir);
    struct set *sets[2] = {&cur, &prev};
    for (int i = 0; i < 2; i++) {
        sets[i]->table = calloc(HSIZE, sizeof *sets[i]->table);
        sets[i]->used = malloc(HSIZE * sizeof *sets[i]->used);
        if (!sets[i]->table || !sets[i]->used) {
            fprintf(stderr, "hot_lines: out of memory\n");
            return 2;
        }
    }
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
            end_window(dir, win, records);
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
