/*
 * model.h -- the part of the fuzz targets' reference models that is
 * Facebook's dispatcher (DESIGN.md section 2), shared by fuzz-ops.c and
 * fuzz-stores.c: a trace of what ran, who takes part in a dispatch and in
 * what order, and what a wait_for does.
 *
 * The including file defines, before it includes this: MODEL_SLOTS, how
 * many registrations its model has, and TRACE, how many events a trace
 * keeps; and, anywhere after it, m_call(r), which runs registration r's
 * callback in the model (marking it PENDING, then HANDLED).
 */
#ifndef FLUX_FUZZ_MODEL_H
#define FLUX_FUZZ_MODEL_H

#include <stdbool.h>

#include <flux.h>

typedef struct trace {
    int v[TRACE];
    int n;
} trace;

static void push(trace *t, int v)
{
    if (t->n < TRACE)
        t->v[t->n++] = v;
}

enum { NOT_RUN, PENDING, HANDLED };

/* One dispatch: participants fixed at its start, identified by the token
 * they had then. */
static bool m_participant[MODEL_SLOTS];
static flux_token m_start_token[MODEL_SLOTS];
static int m_phase[MODEL_SLOTS];
static bool m_removed[MODEL_SLOTS]; /* unregistered during it: not run later */
static bool m_aborted;
/* What flux_last_error_token() and flux_last_error_cycle() must read after
 * the model's latest failing wait: m_failed_token is the callback whose
 * failure aborted the dispatch (see m_abort()); m_stack, the callbacks
 * running, outermost first. */
static flux_token m_failed_token, m_err_token;
static flux_token m_cycle[MODEL_SLOTS + 1];
static int m_cycle_n;
static int m_stack[MODEL_SLOTS], m_depth;

static void m_call(int r);

/* A failure aborts the dispatch; the first names the innermost callback
 * running (for a store's listener, its store). */
static void m_abort(void)
{
    if (!m_aborted && m_depth > 0)
        m_failed_token = m_start_token[m_stack[m_depth - 1]];
    m_aborted = true;
}

static void m_enter(int r)
{
    m_stack[m_depth++] = r;
    m_call(r);
    m_depth--;
}

static int m_find(flux_token t)
{
    for (int r = 0; r < MODEL_SLOTS; r++)
        if (m_participant[r] && m_start_token[r] == t)
            return r;
    return -1;
}

/* flux_wait_for: every token checked before any callback runs, then each
 * that has not run is run, in order, until one fails. */
static flux_status m_wait(const flux_token *tokens, int n)
{
    m_cycle_n = 0;
    m_err_token = m_failed_token;
    if (m_aborted)
        return FLUX_ERR_CALLBACK_FAILED;
    for (int i = 0; i < n; i++) {
        int r = m_find(tokens[i]);
        m_err_token = tokens[i];
        if (r < 0 || m_removed[r])
            return FLUX_ERR_UNKNOWN_TOKEN;
        if (m_phase[r] == PENDING) {
            /* The waiter, then the one asked for and each the one before it
             * waits for, back to the waiter: {3, 3} for itself. */
            int at = m_depth - 1;
            while (m_stack[at] != r)
                at--;
            m_cycle[m_cycle_n++] = m_start_token[m_stack[m_depth - 1]];
            while (at < m_depth)
                m_cycle[m_cycle_n++] = m_start_token[m_stack[at++]];
            return FLUX_ERR_CIRCULAR;
        }
    }
    for (int i = 0; i < n; i++) {
        int r = m_find(tokens[i]);
        if (m_phase[r] == NOT_RUN && !m_removed[r]) {
            m_enter(r);
            if (m_aborted) {
                m_err_token = m_failed_token; /* not the nested waits' errors */
                m_cycle_n = 0;
                return FLUX_ERR_CALLBACK_FAILED;
            }
        }
    }
    return FLUX_OK;
}

/* A dispatch: the registered take part, in registration order (which is
 * token order), each once -- but those a wait already ran and those
 * removed meanwhile -- until one fails. Returns its status. */
static flux_status m_run_dispatch(const bool *registered, const flux_token *token)
{
    int order[MODEL_SLOTS], n = 0;
    for (int r = 0; r < MODEL_SLOTS; r++) {
        m_participant[r] = registered[r];
        m_start_token[r] = token[r];
        m_phase[r] = NOT_RUN;
        m_removed[r] = false;
        if (registered[r])
            order[n++] = r;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && token[order[j]] < token[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    m_aborted = false;
    m_failed_token = 0;
    m_depth = 0;
    for (int i = 0; i < n && !m_aborted; i++)
        if (m_phase[order[i]] == NOT_RUN && !m_removed[order[i]])
            m_enter(order[i]);
    return m_aborted ? FLUX_ERR_CALLBACK_FAILED : FLUX_OK;
}

#endif
