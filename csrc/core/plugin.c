/*
 * plugin.c - backends from outside the tree.  A plugin is a shared
 * object that exports accelerator_backend_plugin(), which hands the core
 * its table (backend.h).  Plugins are named by ACCELERATOR_BACKEND_PLUGINS
 * (paths separated by ':') and by the Python layer, which lists the
 * accelerator.backends entry points and offers them here before the
 * first probe.  The probe (registry.c) opens them, once, after the
 * built-in backends: each is checked (it opens, it exports the symbol,
 * its ABI version and table size, the slots, its name and device type)
 * and either registered after the built-in backends, as a backend like
 * any other, or refused with the reason kept for the report.
 *
 * Plain C, no Python objects.  An accepted plugin stays loaded until the
 * process ends: its code is the backend's.
 */
#define _GNU_SOURCE
#include "core.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The most plugins one process loads, and the most refusals the report
 * lists (past them, the last record counts the rest, each traced). */
#define MAX_PLUGINS ACC_MAX_PLUGINS
#define MAX_REFUSED 64
/* No table is this large: a struct_size above it is garbage. */
#define MAX_STRUCT_SIZE (64u * 1024u)
/* A name or device type: what users write in ACCELERATOR_BACKEND and in
 * a device string ("name:0"). */
#define MAX_NAME 31

/* A plugin named by a source, as the probe meets it. */
typedef struct source {
    char *path;           /* NULL when the source could not name a file */
    char *origin;         /* where it was named, for the report */
    char *label;          /* its name in the report until its table
                           * says one */
    char *error;          /* why the source named no file, or NULL */
    /* A refused plugin's facts, copied from its table (the plugin is
     * unloaded), for the report. */
    char *name, *device_type, *processor_label;
} source;

typedef struct plugin {
    acc_backend table;    /* the core's copy: slots past the plugin's
                           * struct_size are NULL */
    const acc_backend *original;
    char *path;
    char *origin;
} plugin;

static struct {
    pthread_mutex_t lock;       /* offered, sources, closed */
    int offered;                /* the Python layer offered its list */
    int closed;                 /* the probe took the list: no more offers */
    source *sources;
    int n_sources;
    /* Written by the probe only, read once it has completed. */
    plugin accepted[MAX_PLUGINS];
    int n_accepted;
    acc_backend_info refused[MAX_REFUSED];
    int n_refused;
    int n_more;                 /* refusals the last record counts */
} P = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
};

/* The lock is held briefly, but a fork while another thread held it
 * would leave it held in the child for good. */
static void
after_fork_in_child(void)
{
    pthread_mutex_init(&P.lock, NULL);
}

__attribute__((constructor)) static void
register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, after_fork_in_child);
}

/* strdup that keeps NULL; 0 when memory ran out. */
static int
copy_text(char **out, const char *text)
{
    *out = NULL;
    if (text == NULL) {
        return 1;
    }
    *out = strdup(text);
    return *out != NULL;
}

static void
free_source(source *s)
{
    free(s->path);
    free(s->origin);
    free(s->label);
    free(s->error);
    free(s->name);
    free(s->device_type);
    free(s->processor_label);
}

/* Offers ----------------------------------------------------------------- */

int
acc_plugins_offered(void)
{
    int offered;

    pthread_mutex_lock(&P.lock);
    offered = P.offered || P.closed;
    pthread_mutex_unlock(&P.lock);
    return offered;
}

int
acc_plugins_offer(const acc_plugin_source *sources, int count)
{
    source *copy = NULL;
    int taken = 0, made = 0;

    if (count > 0) {
        copy = calloc((size_t)count, sizeof(*copy));
        if (copy == NULL) {
            return -1;
        }
    }
    for (; made < count; made++) {
        const acc_plugin_source *s = &sources[made];

        if (!copy_text(&copy[made].path, s->path)
            || !copy_text(&copy[made].origin, s->origin)
            || !copy_text(&copy[made].label, s->label)
            || !copy_text(&copy[made].error, s->error)) {
            made++;
            goto fail;
        }
    }
    pthread_mutex_lock(&P.lock);
    if (!P.offered && !P.closed) {
        P.offered = 1;
        P.sources = copy;
        P.n_sources = count;
        taken = 1;
    }
    pthread_mutex_unlock(&P.lock);
    if (taken) {
        return 0;
    }
    /* Another thread (or interpreter) offered first, or the probe ran. */
    made = count;
fail:
    for (int i = 0; i < made; i++) {
        free_source(&copy[i]);
    }
    free(copy);
    return taken ? 0 : made == count ? 1 : -1;
}

/* Refusals ---------------------------------------------------------------- */

/* The file name of path: what the report calls a plugin whose table was
 * not read and whose source gave no name. */
static const char *
base_name(const char *path)
{
    const char *slash = strrchr(path, '/');

    return slash != NULL ? slash + 1 : path;
}

static void
refuse(source *s, const acc_backend *table, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Record s as refused, with the facts of its table where it was read
 * (table: NULL when it was not, or is of another ABI). */
static void
refuse(source *s, const acc_backend *table, const char *fmt, ...)
{
    acc_backend_info *info;
    char why[sizeof(info->reason)];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (P.n_refused == MAX_REFUSED) {
        /* The last record becomes the count of those not listed. */
        info = &P.refused[MAX_REFUSED - 1];
        P.n_more = P.n_more == 0 ? 2 : P.n_more + 1;
        memset(info, 0, sizeof(*info));
        info->name = "more plugins";
        info->device_type = "?";
        info->origin = "the plugins refused after those listed";
        info->refused = 1;
        acc_format(info->reason, sizeof(info->reason), "plugin refused: %d "
                   "more plugins were refused (ACCELERATOR_DEBUG=1 traces "
                   "each)", P.n_more);
        acc_trace("plugin %s refused (counted, not listed): %s",
                  s->path ? s->path : s->label, why);
        return;
    }
    if (table != NULL) {
        /* Copies: the plugin's own strings go when it is unloaded. */
        s->name = table->name ? strndup(table->name, MAX_NAME + 33) : NULL;
        s->device_type = table->device_type
                         ? strndup(table->device_type, MAX_NAME + 33) : NULL;
        s->processor_label = table->processor_label
                             ? strndup(table->processor_label, 64) : NULL;
    }
    info = &P.refused[P.n_refused++];
    memset(info, 0, sizeof(*info));
    info->name = s->name != NULL ? s->name
                 : s->label != NULL ? s->label
                 : s->path != NULL ? base_name(s->path) : "?";
    info->device_type = s->device_type != NULL ? s->device_type : "?";
    info->processor_label = s->processor_label;
    info->plugin = s->path;
    info->origin = s->origin;
    info->refused = 1;
    acc_format(info->reason, sizeof(info->reason), "plugin refused: %s",
               why);
    acc_trace("plugin %s (%s) refused: %s", s->path ? s->path : info->name,
              s->origin, why);
}

/* Checks ------------------------------------------------------------------ */

/* How the report names an earlier backend that took a name. */
static void
describe(const acc_backend *b, char *buf, size_t size)
{
    const char *path = acc_plugin_path(b);

    if (path == NULL) {
        acc_format(buf, size, "the built-in backend %s", b->name);
    }
    else {
        acc_format(buf, size, "the plugin %s (%s)", b->name, path);
    }
}

/* NULL when text is a name users can write; otherwise why not. */
static const char *
name_problem(const char *text)
{
    size_t n = strlen(text);

    if (n == 0 || n > MAX_NAME || text[0] < 'a' || text[0] > 'z') {
        return "expected 1 to 31 lowercase letters, digits or '_', "
               "starting with a letter";
    }
    for (size_t i = 1; i < n; i++) {
        char c = text[i];

        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
            return "expected 1 to 31 lowercase letters, digits or '_', "
                   "starting with a letter";
        }
    }
    if (strcmp(text, "none") == 0) {
        return "ACCELERATOR_BACKEND=none means no accelerator";
    }
    if (strcmp(text, "cpu") == 0) {
        return "'cpu' is the host's device type";
    }
    return NULL;
}

/* The table's size at each minor version of this major one.  When a
 * minor version appends slots, the size of the one before it is
 * offsetof(acc_backend, <its first new slot>). */
static size_t
abi_size(unsigned minor)
{
    if (minor == 0) {          /* 1.1 appended the compilers */
        return offsetof(acc_backend, source_formats);
    }
    if (minor == 1) {          /* 1.2 appended the interprocess slots */
        return offsetof(acc_backend, ipc_unsupported);
    }
    return sizeof(acc_backend);
}

/* 0 when the table's ABI version and size are ones this core reads;
 * otherwise the plugin is refused (why said).  abi_major, abi_minor and
 * struct_size open the table in every ABI version. */
static int
check_abi(source *s, const acc_backend *t)
{
    unsigned major = t->abi_major, minor = t->abi_minor;
    size_t size = t->struct_size;

    if (major != ACCELERATOR_BACKEND_ABI_MAJOR) {
        refuse(s, NULL, "it was built for backend ABI %u.%u, and this "
               "accelerator speaks %d.%d: another major version (rebuild "
               "the plugin against this accelerator's "
               "accelerator/backend.h)", major, minor,
               ACCELERATOR_BACKEND_ABI_MAJOR, ACCELERATOR_BACKEND_ABI_MINOR);
        return -1;
    }
    if (minor <= ACCELERATOR_BACKEND_ABI_MINOR) {
        if (size != abi_size(minor)) {
            refuse(s, NULL, "its struct_size, %zu, is not the size of ABI "
                   "%u.%u's table, %zu bytes", size, major, minor,
                   abi_size(minor));
            return -1;
        }
        return 0;
    }
    if (size > MAX_STRUCT_SIZE) {
        refuse(s, NULL, "its struct_size, %zu, is not the size of a "
               "backend table", size);
        return -1;
    }
    /* A newer minor version: appended slots this core does not know.
     * It may load only when it fills none of them, so that nothing it
     * offers is silently ignored. */
    if (size < sizeof(acc_backend)) {
        refuse(s, NULL, "it was built for backend ABI %u.%u, newer than "
               "this accelerator's %d.%d, yet its table (%zu bytes) is "
               "smaller than this version's (%zu)", major, minor,
               ACCELERATOR_BACKEND_ABI_MAJOR, ACCELERATOR_BACKEND_ABI_MINOR, size,
               sizeof(acc_backend));
        return -1;
    }
    for (size_t at = sizeof(acc_backend); at < size; at++) {
        if (((const unsigned char *)t)[at] != 0) {
            refuse(s, NULL, "it was built for backend ABI %u.%u and fills "
                   "slots that this accelerator (ABI %d.%d) does not know "
                   "(byte %zu of its table is set): upgrade accelerator, "
                   "or build the plugin against this version's header",
                   major, minor, ACCELERATOR_BACKEND_ABI_MAJOR,
                   ACCELERATOR_BACKEND_ABI_MINOR, at);
            return -1;
        }
    }
    return 0;
}

/* 0 when neither the name nor the device type of t is taken by one of
 * taken[0..n) and both are names users can write. */
static int
check_names(source *s, const acc_backend *t,
            const acc_backend *const *taken, int n)
{
    const char *what[2] = {"name", "device type"};
    const char *mine[2] = {t->name, t->device_type};

    for (int k = 0; k < 2; k++) {
        const char *problem = name_problem(mine[k]);

        if (problem != NULL) {
            refuse(s, t, "its %s '%.64s' cannot be used: %s", what[k],
                   mine[k], problem);
            return -1;
        }
    }
    /* The alias names the plugin's devices where users pass a device, as
     * its device type does ("cpu" would make the host's type the
     * plugin's); it may be a built-in's device type, as HIP's "cuda". */
    if (t->device_type_alias != NULL) {
        const char *problem = name_problem(t->device_type_alias);

        if (problem != NULL) {
            refuse(s, t, "its device type alias '%.64s' cannot be used: %s",
                   t->device_type_alias, problem);
            return -1;
        }
    }
    for (int i = 0; i < n; i++) {
        const char *theirs[2] = {taken[i]->name, taken[i]->device_type};

        for (int k = 0; k < 2; k++) {
            for (int j = 0; j < 2; j++) {
                char earlier[160];

                if (theirs[j] == NULL || strcmp(mine[k], theirs[j]) != 0) {
                    continue;
                }
                describe(taken[i], earlier, sizeof(earlier));
                refuse(s, t, "its %s '%s' is taken: %s has it as its %s",
                       what[k], mine[k], earlier, what[j]);
                return -1;
            }
        }
    }
    return 0;
}

/* Loading ----------------------------------------------------------------- */

/* Open s and check it; the accepted table, or NULL (refused). */
static const acc_backend *
load(source *s, const acc_backend *const *taken, int n)
{
    acc_backend_plugin_fn entry;
    const acc_backend *t;
    plugin *p;
    void *handle;
    char why[160];

    if (s->path == NULL) {
        refuse(s, NULL, "%s", s->error ? s->error : "no file was named");
        return NULL;
    }
    dlerror();
    handle = dlopen(s->path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        const char *e = dlerror();

        refuse(s, NULL, "the file does not open: %s",
               e ? e : "dlopen failed");
        return NULL;
    }
    dlerror();
    *(void **)&entry = dlsym(handle, ACCELERATOR_BACKEND_PLUGIN_SYMBOL);
    if (entry == NULL) {
        const char *e = dlerror();

        refuse(s, NULL, "it exports no " ACCELERATOR_BACKEND_PLUGIN_SYMBOL " (%s)",
               e ? e : "the symbol is NULL");
        dlclose(handle);
        return NULL;
    }
    t = entry();
    if (t == NULL) {
        refuse(s, NULL, ACCELERATOR_BACKEND_PLUGIN_SYMBOL "() returned no table");
        dlclose(handle);
        return NULL;
    }
    for (int i = 0; i < P.n_accepted; i++) {
        if (P.accepted[i].original == t) {
            refuse(s, &P.accepted[i].table,
                   "it is the plugin %s, loaded already from %s",
                   P.accepted[i].table.name, P.accepted[i].path);
            dlclose(handle);
            return NULL;
        }
    }
    if (check_abi(s, t) < 0) {
        dlclose(handle);
        return NULL;
    }
    p = &P.accepted[P.n_accepted];
    memset(&p->table, 0, sizeof(p->table));
    memcpy(&p->table, t, t->struct_size < sizeof(p->table)
           ? t->struct_size : sizeof(p->table));
    /* The same check a built-in backend passes (backend_check.c). */
    if (acc_backend_incomplete(&p->table, why, sizeof(why)) != NULL) {
        refuse(s, &p->table, "incomplete backend: %s", why);
        dlclose(handle);
        return NULL;
    }
    if (check_names(s, &p->table, taken, n) < 0) {
        dlclose(handle);
        return NULL;
    }
    p->original = t;
    p->path = s->path;
    p->origin = s->origin;
    s->path = s->origin = NULL;   /* kept by p */
    P.n_accepted++;
    acc_trace("plugin %s (%s, %s): backend %s, device type %s, ABI %u.%u",
              p->path, p->origin, ACCELERATOR_BACKEND_PLUGIN_SYMBOL, p->table.name,
              p->table.device_type, (unsigned)t->abi_major,
              (unsigned)t->abi_minor);
    return &p->table;
}

/* The plugins ACCELERATOR_BACKEND_PLUGINS names, as sources. */
static int
sources_from_environment(source **out)
{
    const char *text = getenv("ACCELERATOR_BACKEND_PLUGINS");
    source *list;
    int n = 0, room = 1;

    *out = NULL;
    if (text == NULL || text[0] == '\0') {
        return 0;
    }
    for (const char *c = text; *c; c++) {
        room += *c == ':';
    }
    list = calloc((size_t)room, sizeof(*list));
    if (list == NULL) {
        return 0;
    }
    for (const char *c = text; *c;) {
        const char *end = strchr(c, ':');
        size_t len = end ? (size_t)(end - c) : strlen(c);

        if (len > 0) {
            list[n].path = strndup(c, len);
            list[n].origin = strdup("ACCELERATOR_BACKEND_PLUGINS");
            if (list[n].path == NULL || list[n].origin == NULL) {
                free_source(&list[n]);
                break;
            }
            n++;
        }
        c += len + (end != NULL);
    }
    *out = list;
    return n;
}

int
acc_plugins_load(const acc_backend **registry, int count, int room)
{
    source *env, *offered;
    int n_env, n_offered, most = room - count;

    pthread_mutex_lock(&P.lock);
    P.closed = 1;
    offered = P.sources;
    n_offered = P.n_sources;
    P.sources = NULL;
    P.n_sources = 0;
    pthread_mutex_unlock(&P.lock);
    n_env = sources_from_environment(&env);
    if (most > MAX_PLUGINS) {
        most = MAX_PLUGINS;
    }
    /* The variable first: a plugin named there wins over one of the same
     * name that is installed. */
    for (int pass = 0; pass < 2; pass++) {
        source *list = pass == 0 ? env : offered;
        int n = pass == 0 ? n_env : n_offered;

        for (int i = 0; i < n; i++) {
            const acc_backend *t;

            if (P.n_accepted == most) {
                refuse(&list[i], NULL, "not loaded: at most %d plugins "
                       "are loaded", most);
                continue;
            }
            t = load(&list[i], registry, count);
            if (t != NULL) {
                registry[count++] = t;
            }
        }
    }
    /* The lists stay: the report of a refused plugin points into them. */
    return count;
}

/* The report ------------------------------------------------------------- */

const char *
acc_plugin_path(const acc_backend *b)
{
    for (int i = 0; i < P.n_accepted; i++) {
        if (&P.accepted[i].table == b) {
            return P.accepted[i].path;
        }
    }
    return NULL;
}

const char *
acc_plugin_origin(const acc_backend *b)
{
    for (int i = 0; i < P.n_accepted; i++) {
        if (&P.accepted[i].table == b) {
            return P.accepted[i].origin;
        }
    }
    return NULL;
}

int
acc_plugins_refused_count(void)
{
    return P.n_refused;
}

const acc_backend_info *
acc_plugins_refused_at(int i)
{
    return i >= 0 && i < P.n_refused ? &P.refused[i] : NULL;
}
