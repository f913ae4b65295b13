/* file.c — reading a whole small input file (see file.h for why). */
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "not a regular file";
}

nl_status nl_file_read(const char *path, bool required, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (!required && errno == ENOENT) return NL_OK;
        return nl_error(NL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return nl_error(NL_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return nl_error(NL_ERR_IO, "%s: is %s, not a regular file", path, kind_of(sb.st_mode));
    }
    if ((uint64_t)sb.st_size > NL_FILE_MAX_BYTES) {
        close(fd);
        return nl_error(NL_ERR_FORMAT, "%s: %lld bytes, more than the %zu-byte limit for this file",
                        path, (long long)sb.st_size, NL_FILE_MAX_BYTES);
    }
    size_t cap = (size_t)sb.st_size + 1;
    char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return nl_error(NL_ERR_NOMEM, "%s: no memory for %zu bytes", path, cap);
    }
    size_t n = 0;
    /* the size may change under us: read to end of file, within the cap */
    for (;;) {
        if (n + 1 == cap) {
            if (cap > NL_FILE_MAX_BYTES) {
                free(buf);
                close(fd);
                return nl_error(NL_ERR_FORMAT, "%s: grew past the %zu-byte limit while read", path,
                                NL_FILE_MAX_BYTES);
            }
            char *grown = realloc(buf, cap * 2);
            if (!grown) {
                free(buf);
                close(fd);
                return nl_error(NL_ERR_NOMEM, "%s: no memory for %zu bytes", path, cap * 2);
            }
            buf = grown;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return nl_error(NL_ERR_IO, "%s: read error: %s", path, strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return NL_OK;
}

nl_status nl_file_read_json(const char *path, bool required, json_t **out)
{
    return nl_file_read_json_ex(path, required, 0, out);
}

nl_status nl_file_read_json_ex(const char *path, bool required, size_t flags, json_t **out)
{
    *out = NULL;
    char *text;
    size_t len;
    NL_TRY(nl_file_read(path, required, &text, &len));
    if (!text) return NL_OK;
    json_error_t err;
    json_t *root = json_loadb(text, len, flags, &err);
    free(text);
    if (!root)
        return nl_error(NL_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path, err.line,
                        err.column, err.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return nl_error(NL_ERR_FORMAT, "%s: the top level is not a JSON object", path);
    }
    *out = root;
    return NL_OK;
}
