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

static void m_call(int r);

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
    if (m_aborted)
        return FLUX_ERR_CALLBACK_FAILED;
    for (int i = 0; i < n; i++) {
        int r = m_find(tokens[i]);
        if (r < 0 || m_removed[r])
            return FLUX_ERR_UNKNOWN_TOKEN;
        if (m_phase[r] == PENDING)
            return FLUX_ERR_CIRCULAR;
    }
    for (int i = 0; i < n; i++) {
        int r = m_find(tokens[i]);
        if (m_phase[r] == NOT_RUN && !m_removed[r]) {
            m_call(r);
            if (m_aborted)
                return FLUX_ERR_CALLBACK_FAILED;
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
    for (int i = 0; i < n && !m_aborted; i++)
        if (m_phase[order[i]] == NOT_RUN && !m_removed[order[i]])
            m_call(order[i]);
    return m_aborted ? FLUX_ERR_CALLBACK_FAILED : FLUX_OK;
}

#endif
