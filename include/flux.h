/*
 * flux.h -- the public C interface of libflux.
 *
 * libflux is Facebook's Flux dispatcher as a C library. A dispatcher hands
 * every dispatched payload to every registered callback, in registration
 * order; a callback can defer itself until other callbacks have run with
 * flux_wait_for(). Callbacks are not subscribed to event types: the payload is
 * opaque to the dispatcher and each callback decides what to do with it.
 *
 * This header is the authoritative description of the C ABI. Every function
 * below says what it does, what it returns on each error, who owns what, and
 * whether it may be called from inside a callback or from another thread.
 *
 * Errors
 * ------
 * Functions that can fail return a flux_status: FLUX_OK (0) on success, a
 * positive code otherwise. A failing call changes nothing, and leaves a
 * message naming the function and the tokens involved in flux_last_error()
 * for the calling thread. The message is a detail for people; test the
 * returned status, never the message, to detect an error, and read the
 * values it names from flux_last_error_token() and flux_last_error_cycle().
 *
 * Ownership
 * ---------
 * flux_register() takes ownership of its context: destroy(context), when a
 * destroy function is given, runs exactly once -- on flux_unregister(), on
 * flux_dispatcher_destroy(), or at once when flux_register() itself fails (the
 * SQLite rule, so a binding has a single leak-free path). A registration's
 * destroy function never runs with a library lock held or inside a running
 * dispatch (a store listener's may run inside one: see "Stores"), so it may
 * call any function of this header (even dispatch the same dispatcher) --
 * except the one a failing flux_register() runs at once: that one runs on
 * the caller's thread, so inside the caller's callback when it was called
 * from one, where dispatching that dispatcher fails with
 * FLUX_ERR_ALREADY_DISPATCHING (so do the release_state and destroy that a
 * failing flux_store_create() runs, and a failing group create's destroy);
 * during flux_dispatcher_destroy(), calls on the dispatcher being destroyed
 * fail with FLUX_ERR_INVALID_ARGUMENT. The payload passed
 * to flux_dispatch() stays the caller's; callbacks borrow it for the duration
 * of the call. flux_closure_create() takes ownership of its userdata by the
 * same rule: destroy(userdata) runs once, on flux_closure_destroy() or at once
 * when the create fails.
 *
 * Threading
 * ---------
 * Every function may be called from any thread. A dispatcher serializes its
 * dispatches: a flux_dispatch() on a second thread waits until the running
 * dispatch has finished. Callbacks run synchronously on the thread that called
 * flux_dispatch(). flux_dispatch() from inside a callback of the same
 * dispatcher, on the dispatching thread, fails at once with
 * FLUX_ERR_ALREADY_DISPATCHING and never deadlocks; dispatching a *different*
 * dispatcher from inside a callback is fine -- but when two threads each do
 * so with the dispatcher the other is dispatching (or more, in a ring), they
 * would wait for each other for good, like two locks taken in opposite
 * orders: the flux_dispatch() whose wait would close that cycle fails with
 * FLUX_ERR_ALREADY_DISPATCHING instead (flux_enqueue() never waits: use it
 * there); a flux_dispatch() that must wait with no memory left to note its
 * wait (which that check needs) fails with FLUX_ERR_NO_MEMORY instead of
 * waiting unnoted. That wait is no cancellation point: a thread cancelled
 * (pthread_cancel()) while it waits acts on it once flux_dispatch() has
 * returned. flux_wait_for() works only on the
 * thread that runs the dispatch. flux_register(), flux_unregister(),
 * flux_is_dispatching() and flux_dispatcher_close() (refused while one runs)
 * never wait for a running dispatch. destroy functions
 * run on the thread that removed the registration, except when it was removed
 * while a dispatch was running: then destroy runs on the dispatching thread
 * when that dispatch finishes. flux_last_error() is per thread.
 * flux_enqueue() never waits: while a dispatch runs it queues the payload for
 * the dispatching thread, which runs it before its own call returns.
 * Observer hooks run on the dispatching thread.
 *
 * Signals
 * -------
 * The library installs no signal handler and changes no thread's signal
 * mask. A handled signal does not end a flux_dispatch() that waits for
 * another thread's dispatch: the call goes on waiting, then dispatches. No
 * function of this header is async-signal-safe (they take locks and
 * allocate): a signal handler must not call one, as it must not call
 * malloc(); let it set a flag or write to a pipe, and call libflux from the
 * thread afterwards.
 *
 * Returning
 * ---------
 * Every function the library calls -- a callback, a store's reduce, equal
 * and release_state, a listener or group function, an observer hook, an
 * enqueue's done, a destroy function -- must return normally. Unwinding
 * through libflux (longjmp() out of it, a C++ exception, a host language's
 * error escaping a native callback: a Lua error(), a Ruby raise) is
 * undefined behaviour, and in practice leaves the dispatcher dispatching
 * for good: every later dispatch is refused or waits forever. A binding
 * catches everything at the boundary, turns it into the function's failure
 * value (a callback's or reduce's non-zero return, flux_store_listener_fail()
 * for a listener), and raises it again once the libflux call has returned.
 *
 * Depth
 * -----
 * Every callback that flux_wait_for() runs is one more link of a chain on
 * the dispatching thread's stack (callback -> flux_wait_for -> callback ...).
 * Chains of any depth work as long as they fit: before running a callback,
 * flux_wait_for() checks that the thread has at least a safety margin of
 * stack left (256 KiB, or a quarter of a smaller stack but never under
 * 16 KiB, which reporting the error may itself need: a thread whose stack
 * is 16 KiB or less cannot wait at all -- there a wait that would run a
 * callback, or report a circular dependency, fails with FLUX_ERR_TOO_DEEP;
 * the bound of each thread's stack is looked up once per thread). When it
 * has not, the wait
 * fails with FLUX_ERR_TOO_DEEP and the dispatch is aborted exactly as if a
 * callback had failed: no further callback runs, the waits still unwinding
 * return FLUX_ERR_TOO_DEEP, and flux_dispatch() returns FLUX_ERR_TOO_DEEP
 * (or FLUX_ERR_CALLBACK_FAILED when a callback had failed first). How deep
 * a chain fits depends on each link's own frames: on the main thread's
 * 8 MiB stack, chains of small C callbacks (Tests/c/test-depth.c, built with
 * -O2) stop at about 72,000 links with one-token waits, 31,000 with
 * two-token waits; the test prints the depth it measured ("it went N links
 * deep", build/check/c.log). A callback that itself uses more stack than
 * the margin between two waits is not protected, and neither is a chain on
 * a stack other than the thread's own (a fiber's or coroutine's from
 * makecontext(), a signal handler's alternate stack): its bounds are
 * unknown there, so the check is off; keep such chains within that stack.
 *
 * fork
 * ----
 * A child process inherits the parent's dispatchers as they were at the
 * fork (the library holds each dispatcher's lock across fork(), so their
 * tables are consistent). In the child:
 *   - a dispatcher no thread was dispatching at the fork may be used
 *     normally, and destroyed;
 *   - a dispatcher another thread of the parent was dispatching can never
 *     finish that dispatch: flux_dispatch() on it fails at once with
 *     FLUX_ERR_ALREADY_DISPATCHING (the message says the process forked),
 *     flux_enqueue() too (its done runs at once with that status, since
 *     no dispatch would ever drain the queue), flux_dispatcher_set_observer()
 *     too (its context destroyed at once, since no dispatch would ever end
 *     to install it), flux_register() too (its context destroyed at once,
 *     since the registration would never join), flux_unregister() too
 *     (nothing changed: the destroy would wait for that dispatch's end), and
 *     so do the store and group calls that register or end one;
 *     flux_dispatcher_destroy() too, flux_is_dispatching()
 *     stays 1. Leave it; make a new dispatcher
 *     if the child needs one;
 *   - a dispatch the forking thread itself was running (fork() from a
 *     callback) goes on in the child as in the parent;
 *   - calls another thread of the parent had in flight on a dispatcher
 *     (other than a dispatch) at the fork, and callbacks, destroy functions
 *     and contexts, are the program's business, as with any other state
 *     its threads shared. As with SQLite connections, the safe course is
 *     for the child to use only dispatchers it creates itself.
 *
 * The one thing the library cannot guard against is a dispatcher used after
 * (or while) flux_dispatcher_destroy() frees it, from any thread: as with
 * free(), the caller must make sure no other call is in flight.
 *
 * Versioning
 * ----------
 * From 1.0 on, versions with the same major number are ABI compatible and
 * the shared library's SONAME is libflux.so.FLUX_VERSION_MAJOR. While the
 * major number is 0, the minor number plays its part: 0.x.y and 0.x.z are
 * ABI compatible, 0.x and 0.(x+1) are not, and the SONAME is
 * libflux.so.0.FLUX_VERSION_MINOR (0.2.0: libflux.so.0.2). Compare
 * flux_version() with FLUX_VERSION_NUMBER to check at run time that header
 * and library match. CHANGELOG.md says what changed in each version.
 */
#ifndef FLUX_H
#define FLUX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLUX_VERSION_MAJOR 0
#define FLUX_VERSION_MINOR 2
#define FLUX_VERSION_PATCH 0

/** "MAJOR.MINOR.PATCH". A plain literal, not stringized from the numbers,
 *  so that importers that do not expand macros (Swift's, ctypesgen) see it;
 *  bindings/python/tests/test_header.py checks it. */
#define FLUX_VERSION_STRING "0.2.0"
/** MAJOR*10000 + MINOR*100 + PATCH: the value flux_version() returns. A
 *  literal, like every integer constant here, so that importers that skip
 *  computed macros (Swift's, cffi's) see it; Tests/c/header.c checks it. */
#define FLUX_VERSION_NUMBER 200
/** True when the header is at least version major.minor.patch. */
#define FLUX_VERSION_CHECK(major, minor, patch)                                \
    (FLUX_VERSION_NUMBER >= ((major) * 10000 + (minor) * 100 + (patch)))

/* Every public symbol is marked FLUX_API. Define it before including this
 * header to override (e.g. to empty when linking a static copy). */
#ifndef FLUX_API
#  if defined(__GNUC__) || defined(__clang__)
#    define FLUX_API __attribute__((visibility("default")))
#  else
#    define FLUX_API
#  endif
#endif

/* ------------------------------------------------------------------------ */
/* Types                                                                    */
/* ------------------------------------------------------------------------ */

/** A dispatcher. Opaque: create with flux_dispatcher_create(). */
typedef struct flux_dispatcher flux_dispatcher;

/** Identifies one registration. Unique within a dispatcher, never reused
 *  (tokens count up from 1), and never 0, so 0 can mean "no token". */
typedef uint64_t flux_token;

/** The result of every call that can fail. Codes are stable within a major
 *  version; new codes may be added after FLUX_ERR_TOO_DEEP. */
typedef enum flux_status {
    FLUX_OK = 0,
    /** A NULL dispatcher, callback or out-pointer; NULL tokens with count > 0;
     *  a malformed signature; the dispatcher is being destroyed; destroying
     *  a dispatcher that has stores, or a store in a live group; destroying
     *  a store from its own releases. */
    FLUX_ERR_INVALID_ARGUMENT = 1,
    /** A token that was never issued by this dispatcher, was already
     *  unregistered, or (for flux_wait_for) joined during this dispatch. */
    FLUX_ERR_UNKNOWN_TOKEN = 2,
    /** flux_dispatch() from inside a callback of the same dispatcher;
     *  flux_dispatcher_destroy() or flux_store_destroy() while a dispatch
     *  runs; in a child process, flux_dispatch(), flux_enqueue(),
     *  flux_register() or flux_unregister() on a dispatch the fork orphaned
     *  (see "fork"). */
    FLUX_ERR_ALREADY_DISPATCHING = 3,
    /** flux_wait_for() while this thread is not running a dispatch of this
     *  dispatcher; flux_store_has_changed(), flux_store_emit_change() or
     *  flux_store_listener_fail() outside their window. */
    FLUX_ERR_NOT_DISPATCHING = 4,
    /** flux_wait_for() on a callback that has started but not finished in
     *  this dispatch: a cycle, or a callback waiting on itself. */
    FLUX_ERR_CIRCULAR = 5,
    /** A callback returned non-zero; the dispatch was aborted. */
    FLUX_ERR_CALLBACK_FAILED = 6,
    /** An allocation failed; nothing was changed. */
    FLUX_ERR_NO_MEMORY = 7,
    /** The chain of waiting callbacks is too deep for this thread's stack:
     *  flux_wait_for() refused to run one more callback, and the dispatch
     *  was aborted as if a callback had failed. See "Depth" below. */
    FLUX_ERR_TOO_DEEP = 8
} flux_status;

/** A registered callback. context is the pointer given to flux_register();
 *  payload the pointer given to flux_dispatch(), borrowed for this call.
 *  Return 0 to go on; any other value aborts the dispatch. It must return
 *  (see "Returning" above): never unwind through the library. */
typedef int (*flux_callback)(void *context, const void *payload);

/** Releases a context handed to flux_register() (or a closure's userdata). */
typedef void (*flux_destroy)(void *context);

/* ------------------------------------------------------------------------ */
/* Dispatcher                                                               */
/* ------------------------------------------------------------------------ */

/**
 * Creates a dispatcher with no callbacks.
 *
 * @return the dispatcher, owned by the caller (release it with
 *         flux_dispatcher_destroy()), or NULL when memory runs out.
 * Threads: any thread.
 */
FLUX_API flux_dispatcher *flux_dispatcher_create(void);

/**
 * Destroys a dispatcher: unregisters every remaining callback, running each
 * one's destroy(context) once, in registration order, then frees the
 * dispatcher. Destroying NULL is a harmless no-op that returns FLUX_OK.
 *
 * While it runs, destroy functions that call flux_register(),
 * flux_unregister(), flux_dispatch(), flux_dispatcher_close() or
 * flux_dispatcher_destroy() on d get FLUX_ERR_INVALID_ARGUMENT.
 *
 * Allocates nothing, so it cannot run out of memory.
 *
 * @return FLUX_OK, and d is gone.
 *         FLUX_ERR_ALREADY_DISPATCHING when a dispatch is running (from inside
 *         a callback, or on another thread): nothing is changed, d stays valid.
 *         FLUX_ERR_INVALID_ARGUMENT from a destroy function run by this very
 *         call: d is already being destroyed, and the outer call frees it;
 *         from one run by flux_dispatcher_close(): that call still uses d,
 *         so destroy it once the close has returned; or d still has stores
 *         or groups (see "Stores"): destroy them first. Nothing is changed.
 * Threads: any thread, but no other call on d may be in flight or follow.
 */
FLUX_API flux_status flux_dispatcher_destroy(flux_dispatcher *d);

/**
 * Closes a dispatcher for good without freeing it: what
 * flux_dispatcher_destroy() does but the freeing, for a host whose other
 * threads may still hold d. It unregisters every remaining callback, running
 * each one's destroy(context) once, in registration order, and clears the
 * observer. In one step, as to dispatches: one that starts first makes this
 * call fail, and any call after it (a dispatch that was waiting for another
 * thread's included) fails with FLUX_ERR_INVALID_ARGUMENT, never running
 * part of the callbacks. Every later call on d fails so, but
 * flux_is_dispatching() (0), flux_dispatcher_close() (FLUX_OK: closed
 * already, though another thread's close may still be releasing) and
 * flux_dispatcher_destroy(), which then frees it and nothing more -- once
 * this call has returned: from a destroy function it runs, d is still in
 * use, and flux_dispatcher_destroy() fails with FLUX_ERR_INVALID_ARGUMENT.
 *
 * Allocates nothing, so it cannot run out of memory.
 *
 * @return FLUX_OK, and d is closed.
 *         FLUX_ERR_INVALID_ARGUMENT: d is NULL, or is being destroyed (a
 *         call from a destroy function that flux_dispatcher_destroy() runs:
 *         d does not stay valid); or d still has stores or groups (see
 *         "Stores"): destroy them first. Nothing is changed.
 *         FLUX_ERR_ALREADY_DISPATCHING when a dispatch is running (from inside
 *         a callback, or on another thread): nothing is changed.
 * Threads: any thread; other calls on d may be in flight.
 */
FLUX_API flux_status flux_dispatcher_close(flux_dispatcher *d);

/**
 * Registers callback(context, payload) to be called for every dispatch.
 * Callbacks run in registration order. A callback registered while a dispatch
 * is running is first called by the next dispatch.
 *
 * @param d          the dispatcher.
 * @param callback   the function to call; must not be NULL.
 * @param context    passed to callback and destroy; may be NULL. Ownership
 *                   passes to the dispatcher whatever the outcome.
 * @param destroy    called once with context when the registration ends, or
 *                   at once if this call fails; may be NULL.
 * @param out_token  receives the new token (never 0); must not be NULL.
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: d, callback or out_token is NULL, or d
 *         is being destroyed.
 *         FLUX_ERR_NO_MEMORY.
 *         FLUX_ERR_ALREADY_DISPATCHING: only in a child process, on a
 *         dispatch the fork orphaned (see "fork").
 *         On any error, destroy(context) has already run and *out_token, if
 *         out_token is not NULL, is 0.
 * Threads: any thread, from inside a callback too; never waits for a
 *          running dispatch.
 */
FLUX_API flux_status flux_register(flux_dispatcher *d, flux_callback callback,
                                   void *context, flux_destroy destroy,
                                   flux_token *out_token);

/**
 * Removes a registration. Its callback is not called by any dispatch that
 * starts afterwards. When a dispatch is running, the removal is stamped on
 * the registration, and the dispatching thread reads the stamp before each
 * callback it calls: a callback unregistered from inside a callback is not
 * called later in that dispatch; one unregistered from another thread is not
 * called once the dispatching thread has seen the stamp -- certainly not when
 * this call returned before, in the program's own synchronization, the
 * dispatching thread went on (say, a callback waiting on a flag the other
 * thread sets afterwards) -- but may already be running, or about to run,
 * when this returns.
 * destroy(context) runs once: here, before this call returns, when no
 * dispatch is running; when the running dispatch finishes otherwise (so a
 * callback may unregister itself, and a callback still running on another
 * thread never sees its context destroyed under it).
 *
 * A store's registration (flux_store_token()) and a group's belong to them:
 * this call refuses them, since ending one would free what its owner still
 * uses. End them with flux_store_destroy() and flux_store_group_release().
 *
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: d is NULL, or is being destroyed; or
 *         token is a store's or a group's (the message says which function
 *         ends it). Nothing changed.
 *         FLUX_ERR_UNKNOWN_TOKEN: token is 0, was never issued by d, or was
 *         already unregistered.
 *         FLUX_ERR_NO_MEMORY: only while a dispatch runs, when there is no
 *         memory to note the removal; nothing changed (the callback stays
 *         registered). With no dispatch running, a call that succeeds
 *         allocates nothing.
 *         FLUX_ERR_ALREADY_DISPATCHING: only in a child process, on a
 *         dispatch the fork orphaned (see "fork"); nothing changed.
 * Threads: any thread, from inside a callback too; never waits for a
 *          running dispatch.
 */
FLUX_API flux_status flux_unregister(flux_dispatcher *d, flux_token token);

/**
 * Calls every registered callback with payload, in registration order, each
 * at most once (flux_wait_for() may run some earlier). The participants are
 * fixed when the dispatch starts. When a callback returns non-zero, the
 * dispatch stops: no further callback runs, flux_wait_for() calls still
 * unwinding return FLUX_ERR_CALLBACK_FAILED, and the dispatcher is idle and
 * ready for the next dispatch. A chain of waits too deep for the stack stops
 * it the same way, with FLUX_ERR_TOO_DEEP.
 *
 * @param payload  opaque to the dispatcher; may be NULL. It stays the
 *                 caller's and must outlive the call.
 * @return FLUX_OK when every callback returned 0.
 *         FLUX_ERR_INVALID_ARGUMENT: d is NULL, or is being destroyed.
 *         FLUX_ERR_ALREADY_DISPATCHING: called from inside a callback of d on
 *         the dispatching thread; or from inside a callback of another
 *         dispatcher while the thread dispatching d waits, itself or through
 *         others, for this one (see "Threading"). The running dispatch goes
 *         on unharmed. In a child process: another thread of the parent was
 *         dispatching d when it forked (see "fork" above).
 *         FLUX_ERR_CALLBACK_FAILED: a callback returned non-zero; the message
 *         names its token and the value it returned.
 *         FLUX_ERR_TOO_DEEP: a chain of flux_wait_for() calls reached this
 *         thread's stack limit (see "Depth" above) before any callback
 *         failed; the dispatch was aborted.
 *         FLUX_ERR_NO_MEMORY: another thread was dispatching d and there
 *         was no memory to note this call's wait (see "Threading"): nothing
 *         ran.
 * Threads: any thread. While another thread dispatches d, this call waits for
 *          that dispatch to finish, then runs. From inside a callback of d on
 *          the dispatching thread it fails at once.
 */
FLUX_API flux_status flux_dispatch(flux_dispatcher *d, const void *payload);

/**
 * flux_dispatch(), except that it never waits for another thread: while
 * another thread dispatches d (or is about to), it fails at once, having
 * run nothing. For a caller holding a lock that the other thread's callbacks
 * may need -- a language runtime's global lock, say: it tries first, and on
 * FLUX_ERR_ALREADY_DISPATCHING lets go of the lock and calls flux_dispatch(),
 * which waits (and gives the definitive answer: it fails the same way inside
 * a callback of d on this thread). Queued payloads (flux_enqueue()) are run
 * as flux_dispatch() runs them.
 *
 * @return as flux_dispatch(), and FLUX_ERR_ALREADY_DISPATCHING also when
 *         another thread is dispatching d: nothing ran, and the message says
 *         so.
 * Threads: any thread; never waits for a dispatch (the lock it takes, as
 *          every call does, is never held while a callback runs).
 */
FLUX_API flux_status flux_try_dispatch(flux_dispatcher *d, const void *payload);

/**
 * From inside a callback, runs the callbacks of the given tokens that have
 * not yet run in this dispatch, in the order given, before returning. Tokens
 * whose callbacks already finished in this dispatch are skipped. Every token
 * is checked -- registered, and not running further up the stack -- before
 * any callback is invoked, so on FLUX_ERR_UNKNOWN_TOKEN or FLUX_ERR_CIRCULAR
 * no callback has run; a token whose callback is unregistered by one this
 * call runs is then skipped, not an error. A callback of another dispatcher
 * that one of d's callbacks dispatched counts as inside that callback of d:
 * waiting for it is FLUX_ERR_CIRCULAR, and the others run as from it.
 *
 * @param tokens  an array of count tokens; may be NULL only when count is 0.
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: d is NULL, or tokens is NULL with
 *         count > 0, or count is more than SIZE_MAX / 2 (no array is that
 *         long), or d is being destroyed (a call from a destroy that
 *         flux_dispatcher_destroy() runs).
 *         FLUX_ERR_NOT_DISPATCHING: this thread is not running a dispatch of
 *         d (no dispatch at all, or one running on another thread), or the
 *         call comes from an observer hook or a done (see "Observer"), not
 *         from a callback.
 *         FLUX_ERR_UNKNOWN_TOKEN: a token is 0, never issued, unregistered
 *         (during this dispatch too, even after its callback ran), or was
 *         registered during this dispatch (such callbacks join the next one).
 *         FLUX_ERR_CIRCULAR: a token's callback is running further up the
 *         stack (a cycle, or a callback waiting on itself). The message names
 *         every token of the cycle: "token 3 waits for 1, which is waiting
 *         for 2, which is waiting for 3" (or "token 3 waits for itself").
 *         FLUX_ERR_CALLBACK_FAILED: a callback run by this call, or earlier
 *         in this dispatch, failed; the dispatch is being aborted. Once it
 *         is, this comes before any token error.
 *         FLUX_ERR_TOO_DEEP: less than the safety margin of stack is left
 *         on this thread (see "Depth" above), so the callback was not run
 *         (on a stack too small to wait at all, a cycle is refused so too);
 *         or a deeper wait of this dispatch failed so. The dispatch is being
 *         aborted, and like FLUX_ERR_CALLBACK_FAILED this comes before any
 *         token error. Return it (any non-zero value) from the callback.
 *         With several bad tokens, the first in the array is the one reported.
 * Threads: only on the thread running the dispatch, from inside a callback.
 */
FLUX_API flux_status flux_wait_for(flux_dispatcher *d, const flux_token *tokens,
                                   size_t count);

/**
 * @return 1 while a dispatch of d is running (on any thread), else 0; 0 when d
 *         is NULL.
 * Threads: any thread, from inside a callback too; never waits.
 */
FLUX_API int flux_is_dispatching(const flux_dispatcher *d);

/* ------------------------------------------------------------------------ */
/* Stores                                                                   */
/* ------------------------------------------------------------------------ */

/*
 * Facebook's FluxStore, FluxReduceStore and FluxStoreGroup. A store is a
 * callback registered with a dispatcher that owns a state and tells its
 * listeners when that state changed. Each dispatch, the store forgets
 * whether it changed, then calls reduce(context, state, payload, &next):
 *
 *  - when next is state (the same pointer), nothing is compared or released;
 *    the store counts as changed only if reduce called
 *    flux_store_emit_change() (a store that changes its state in place, or
 *    one that handles payloads itself: Facebook's FluxStore);
 *  - otherwise equal(context, state, next) decides (NULL equal: pointer
 *    identity, so any other pointer is a change). Not equal: the store keeps
 *    next, counts as changed and releases the old state; equal: it releases
 *    next and keeps state. Either release happens right after that store's
 *    reduce, before its listeners run.
 *
 * When the store changed, each of its listeners runs once, after the reduce
 * and the release, still inside the dispatch, on the dispatching thread. An
 * emit calls the listeners present when it begins, in the order they were
 * added, skipping any removed meanwhile; a listener added during an emit
 * first runs in the next one.
 *
 * A reduce that returns non-zero fails the dispatch like any failing
 * callback (flux_dispatch() returns FLUX_ERR_CALLBACK_FAILED, naming the
 * store's token and the value returned): the store ignores *next (the reduce
 * frees whatever it allocated itself), keeps its state, runs no listener, and
 * flux_store_has_changed() then reports 0. Once a dispatch is aborted (say a
 * flux_wait_for() inside reduce reported a failure that reduce ignored), a
 * store keeps its old state and runs no listener whatever its reduce
 * returns; a different *next is released -- unless the reduce also returned
 * non-zero: a failing reduce's *next is ignored, as above. So too when
 * equal's own flux_wait_for() meets the failure; one met by release_state,
 * as it releases the replaced state, comes after the new state was kept,
 * and only stops the listeners. Likewise a
 * listener whose flux_wait_for() meets a failure stops its store's emit when
 * it returns (no further listener runs), whether or not it reports the
 * failure.
 *
 * Another callback or store may flux_wait_for() a store's token
 * (flux_store_token()) and then read its new state: this is how stores
 * depend on each other. A group runs a function once per dispatch after all
 * of its stores (it registers a callback that waits for their tokens).
 *
 * Ownership follows the rule of flux_register(): every context handed to a
 * create or add function is destroyed exactly once -- also when that call
 * fails -- and release_state sees every state the store was given or
 * produced exactly once (the initial state included, also when
 * flux_store_create() fails). On flux_store_destroy() the listeners' destroys
 * run first (in the order they were added), then release_state(state), then
 * destroy(context). Unlike a registration's destroy, a listener's destroy can
 * run inside a dispatch, on the dispatching thread: when a listener is
 * removed from inside a listener or a reduce.
 *
 * What a reduce, equal or release function, or a listener, may call: any
 * function of this header, with these results on its own dispatcher --
 * flux_dispatch(): FLUX_ERR_ALREADY_DISPATCHING; flux_store_destroy() and
 * flux_dispatcher_destroy(): FLUX_ERR_ALREADY_DISPATCHING, nothing changed;
 * flux_store_emit_change(): only from reduce (or what reduce calls);
 * flux_store_listener_fail(): only from a listener or a group function;
 * flux_store_add_listener()/remove_listener(), flux_store_group_create()/
 * release(), flux_store_create(), flux_wait_for(), flux_store_has_changed():
 * as documented below.
 *
 * Threads: a store's reduce, equal and release functions and its listeners
 * run on the thread that dispatches (release_state and the destroys also on
 * the thread that destroys the store). Adding and removing listeners, and
 * reading a store's state, token and dispatcher, are safe from any thread at
 * any time; flux_store_has_changed() and flux_store_emit_change() only mean
 * something on the dispatching thread and fail elsewhere. Destroying a store
 * or a group, like destroying a dispatcher, must not race other calls on it.
 */

/** A store. Opaque: create with flux_store_create(). */
typedef struct flux_store flux_store;

/** A group of stores. Opaque: create with flux_store_group_create(). */
typedef struct flux_store_group flux_store_group;

/** Sets *next to the state after payload (state itself when nothing changes;
 *  *next holds state when called) and returns 0; non-zero fails the
 *  dispatch, and the store keeps state (*next is then ignored). context is
 *  the store's context; payload the pointer given to flux_dispatch(). */
typedef int (*flux_reduce_fn)(void *context, void *state, const void *payload,
                              void **next);

/** Non-zero when a and b are equal states (a is the current one). NULL
 *  means pointer identity (Facebook's ===). */
typedef int (*flux_equal_fn)(void *context, const void *a, const void *b);

/** Lets go of a state the store no longer holds: a replaced state, a new
 *  state that was equal and discarded, the last state on destroy or when
 *  create fails. NULL: states are not owned. */
typedef void (*flux_release_fn)(void *context, void *state);

/** A store listener, or a group's function. */
typedef void (*flux_listener_fn)(void *context);

/** A store listener's id (flux_store_add_listener()): per store, counting
 *  up from 1, never reused. Not a dispatch token: never pass one to
 *  flux_wait_for() or flux_unregister(). */
typedef uint64_t flux_listener_id;

/**
 * Creates a store holding initial_state and registers it with d (a store
 * created during a dispatch first handles the next one). The store takes
 * ownership of initial_state (when release_state is given) and of context.
 *
 * @param d              the dispatcher; it must outlive the store (it
 *                       refuses to be destroyed while the store exists).
 * @param initial_state  the first state; may be NULL.
 * @param reduce         must not be NULL.
 * @param equal          may be NULL (pointer identity).
 * @param release_state  may be NULL (states are not owned).
 * @param context        passed to reduce, equal, release_state and destroy.
 * @param destroy        called once with context when the store is
 *                       destroyed, or at once if this call fails; may be NULL.
 *                       The store still counts as its dispatcher's while it
 *                       runs, so it cannot destroy that dispatcher.
 * @param out            receives the store, owned by the caller (destroy it
 *                       with flux_store_destroy()); must not be NULL.
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: d, reduce or out is NULL, or d is being
 *         destroyed.
 *         FLUX_ERR_NO_MEMORY.
 *         FLUX_ERR_ALREADY_DISPATCHING: only in a child process, on a
 *         dispatch the fork orphaned (see "fork").
 *         On any error release_state(context, initial_state) and then
 *         destroy(context) have already run, and *out, if out is not NULL,
 *         is NULL.
 * Threads: any thread, from inside a callback, reduce or listener too.
 */
FLUX_API flux_status flux_store_create(flux_dispatcher *d, void *initial_state,
                                       flux_reduce_fn reduce, flux_equal_fn equal,
                                       flux_release_fn release_state, void *context,
                                       flux_destroy destroy,
                                       flux_store **out);

/**
 * @return the store's current state; NULL when s is NULL. During a dispatch
 *         on another thread it may be the state before or after this
 *         dispatch, and a replaced state is released right after the store's
 *         reduce: a thread other than the dispatching one should read a
 *         state only when it knows no dispatch runs.
 * Threads: any thread, from inside a callback, reduce or listener too.
 */
FLUX_API void *flux_store_state(const flux_store *s);

/**
 * @return the token of the store's registration, for flux_wait_for(): a
 *         callback that waits for it may then read the store's new state
 *         (flux_unregister() refuses it: flux_store_destroy() ends it).
 *         0 when s is NULL.
 * Threads: any thread, any time.
 */
FLUX_API flux_token flux_store_token(const flux_store *s);

/** @return the dispatcher the store is registered with; NULL when s is NULL.
 *  Threads: any thread, any time. */
FLUX_API flux_dispatcher *flux_store_dispatcher(const flux_store *s);

/**
 * @return 1 while the store's listeners are being run (its emit, on the
 *         dispatching thread: from when the first listener is called until
 *         the last has returned, or the emit stopped at a failure), else 0;
 *         0 when s is NULL. For a host that shows something only for the
 *         emit's duration (the error a change carries, say).
 * Threads: any thread, any time; from inside a listener it reads 1.
 */
FLUX_API int flux_store_is_emitting(const flux_store *s);

/**
 * Reports whether the store changed in its most recent handling of a
 * payload (Facebook's hasChanged()). Before the store has run in this
 * dispatch, that is the previous dispatch's result: call it after
 * flux_wait_for() on flux_store_token(s).
 *
 * @param changed  receives 1 or 0; must not be NULL. Set to 0 on any error.
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: s or changed is NULL.
 *         FLUX_ERR_NOT_DISPATCHING: this thread is not running a dispatch of
 *         the store's dispatcher.
 * Threads: only the dispatching thread, from a callback, reduce or listener.
 */
FLUX_API flux_status flux_store_has_changed(const flux_store *s, int *changed);

/**
 * Marks the store changed, so its listeners run once its reduce returns
 * (for a store that keeps its state in place: reduce leaves *next == state).
 *
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: s is NULL.
 *         FLUX_ERR_NOT_DISPATCHING: not called between the start and the end
 *         of this store's own reduce, on the dispatching thread (anything
 *         the reduce calls counts -- a flux_wait_for() running another
 *         store's reduce too; the store's listeners do not).
 * Threads: only the dispatching thread, from inside the store's reduce.
 */
FLUX_API flux_status flux_store_emit_change(flux_store *s);

/**
 * Adds fn(context) to the store's listeners: it runs once per dispatch that
 * changed the store. Added during an emit, it first runs in the next one.
 *
 * @param fn       must not be NULL.
 * @param context  passed to fn and destroy; may be NULL. Ownership passes to
 *                 the store whatever the outcome.
 * @param destroy  called once with context: by flux_store_remove_listener()
 *                 (after fn returns, when fn is running), by
 *                 flux_store_destroy(), or at once if this call fails; may
 *                 be NULL.
 * @param out      receives the listener's id: ids are per store, count up
 *                 from 1 (a failed add uses none) and are never reused.
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: s, fn or out is NULL, or s is being
 *         destroyed (a call from a listener's destroy that
 *         flux_store_destroy() runs).
 *         FLUX_ERR_NO_MEMORY.
 *         On any error destroy(context) has already run and *out, if out is
 *         not NULL, is 0.
 * Threads: any thread, from inside a callback, reduce or listener too.
 */
FLUX_API flux_status flux_store_add_listener(flux_store *s, flux_listener_fn fn,
                                             void *context,
                                             flux_destroy destroy,
                                             flux_listener_id *out);

/**
 * Removes a listener: no emit calls it after this returns on this thread (an
 * emit running on another thread may be calling it right now). Its destroy
 * runs here, before this returns -- or, when the listener is running (it is
 * removing itself, or it runs on another thread), right after it returns.
 * So this may run a destroy inside a dispatch.
 *
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: s is NULL.
 *         FLUX_ERR_UNKNOWN_TOKEN: listener is 0, was never issued by s, or
 *         was already removed.
 * Threads: any thread, from inside a callback, reduce or listener too.
 */
FLUX_API flux_status flux_store_remove_listener(flux_store *s, flux_listener_id listener);

/**
 * Fails the listener (or group function) that calls it: flux_listener_fn
 * returns nothing, so this is how a listener reports an error -- a binding's
 * listener that raised, say. When the listener returns, its store's emit
 * stops (no further listener of that store runs) and the store's callback
 * returns value, which aborts the dispatch like any failing callback:
 * flux_dispatch() returns FLUX_ERR_CALLBACK_FAILED naming the store's token
 * (for a group function, the group's) and value. Calling it again in the
 * same listener replaces value. "Inside" counts what the listener calls:
 * from a callback or a reduce that the listener's flux_wait_for() runs, it
 * fails that listener (the innermost one running on the thread).
 *
 * @param d      the dispatcher of the store whose listener is running.
 * @param value  non-zero.
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: d is NULL, or value is 0, or d is being
 *         destroyed (a call from a destroy that flux_dispatcher_destroy()
 *         runs).
 *         FLUX_ERR_NOT_DISPATCHING: not called from inside a listener or a
 *         group function of d, on the dispatching thread.
 * Threads: only from inside a listener or group function, on its thread.
 */
FLUX_API flux_status flux_store_listener_fail(flux_dispatcher *d, int value);

/**
 * Destroys a store: unregisters it, then runs its listeners' destroys (in
 * the order they were added), release_state(state) and destroy(context),
 * each once, and frees it. Destroying NULL is a no-op returning FLUX_OK.
 *
 * @return FLUX_OK, and s is gone.
 *         FLUX_ERR_ALREADY_DISPATCHING: a dispatch of the store's dispatcher
 *         is running (from inside a callback, reduce or listener, or on
 *         another thread); checked first, and again as the store is
 *         unregistered, so a dispatch that starts on another thread during
 *         this call makes it fail too. Nothing is changed.
 *         FLUX_ERR_INVALID_ARGUMENT: the store is in a live group (release
 *         the group first); or s is being destroyed (a call from one of its
 *         listeners' destroys, its release_state or its destroy, which this
 *         very call runs: the outer call frees it). Nothing is changed.
 *         Allocates nothing, so never fails for memory.
 * Threads: any thread, but no other call on s may be in flight or follow.
 *          Once it returns FLUX_OK, no dispatch calls the store's reduce,
 *          equal or listeners again, on any thread.
 */
FLUX_API flux_status flux_store_destroy(flux_store *s);

/**
 * Creates a group: fn(context) runs once per dispatch, after every store in
 * stores has handled the payload (Facebook's FluxStoreGroup). The group
 * registers a callback with the stores' dispatcher that waits for all of
 * their tokens; a store that fails makes the group's callback fail too.
 * While the group lives, its stores cannot be destroyed.
 *
 * @param stores   count stores, all on one dispatcher; the array is copied.
 * @param count    at least 1.
 * @param fn       must not be NULL.
 * @param context  passed to fn and destroy; may be NULL. Ownership passes to
 *                 the group whatever the outcome.
 * @param destroy  called once with context when the group is released, or
 *                 at once if this call fails; may be NULL.
 * @param out      receives the group, owned by the caller (release it with
 *                 flux_store_group_release()); must not be NULL.
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: count is 0 or more than SIZE_MAX / 2;
 *         stores, a store, fn or out is NULL; the stores are not all on one
 *         dispatcher; the dispatcher is being destroyed, or a store is (a
 *         call from a destroy that flux_store_destroy() runs).
 *         FLUX_ERR_NO_MEMORY.
 *         FLUX_ERR_ALREADY_DISPATCHING: only in a child process, on a
 *         dispatch the fork orphaned (see "fork").
 *         On any error destroy(context) has already run and *out, if out is
 *         not NULL, is NULL.
 * Threads: any thread, from inside a callback, reduce or listener too (a
 *          group created during a dispatch first runs in the next one).
 */
FLUX_API flux_status flux_store_group_create(flux_store *const *stores, size_t count,
                                             flux_listener_fn fn, void *context,
                                             flux_destroy destroy,
                                             flux_store_group **out);

/**
 * @return the token of the group's registration (as flux_store_token() is a
 *         store's): a callback that flux_wait_for()s it runs after the
 *         group's fn; flux_unregister() refuses it: flux_store_group_release()
 *         ends it. A binding that lost a release's status (an interrupt
 *         as the call returned) may ask flux_unregister() with it, while the
 *         dispatcher cannot have been closed meanwhile: it changes nothing,
 *         and returns FLUX_ERR_UNKNOWN_TOKEN when the release ran (tokens
 *         are never reused), FLUX_ERR_INVALID_ARGUMENT while the group is
 *         live, and FLUX_ERR_ALREADY_DISPATCHING on a dispatcher a fork
 *         orphaned, which refuses the release too. 0 when g is NULL.
 * Threads: any thread, until g is released.
 */
FLUX_API flux_token flux_store_group_token(const flux_store_group *g);

/**
 * Releases a group: unregisters its callback, lets go of its stores, runs
 * destroy(context) once and frees it. During a dispatch (from inside a
 * callback, reduce or listener, say) the group is not called again by it:
 * once this returns on the dispatching thread, that dispatch does not call
 * fn, even when the group's callback was already waiting for its stores
 * (called on another thread, this may return while fn runs), and the
 * release itself happens when that dispatch ends, on the
 * dispatching thread; its stores stop counting it when this returns (they
 * cannot be destroyed while that dispatch runs anyway).
 * Releasing NULL is a no-op returning FLUX_OK.
 *
 * @return FLUX_OK, and g is gone (do not use it again).
 *         FLUX_ERR_NO_MEMORY: only while a dispatch runs, when there is no
 *         memory to note the removal (as for flux_unregister()); nothing
 *         changed: the group stays registered and keeps its stores, and g
 *         must still be released. With no dispatch running this call
 *         allocates nothing.
 *         FLUX_ERR_ALREADY_DISPATCHING: only in a child process, on a
 *         dispatch the fork orphaned (see "fork"); nothing changed.
 * Threads: any thread, from inside a callback, reduce or listener too; but
 *          no other call on g may be in flight or follow.
 */
FLUX_API flux_status flux_store_group_release(flux_store_group *g);

/* ------------------------------------------------------------------------ */
/* Queued dispatch                                                          */
/* ------------------------------------------------------------------------ */

/*
 * flux_dispatch() keeps Facebook's rule: no dispatch in the middle of a
 * dispatch. flux_enqueue() is for an action that causes another: when the
 * dispatcher is busy it queues the payload for the thread running the
 * dispatch, which dispatches it -- a full dispatch of its own -- before its
 * own call returns.
 */

/** Reports an enqueued payload's outcome: called exactly once per
 *  flux_enqueue() call, with the context and the payload given to that call
 *  and the status of the payload's own dispatch (FLUX_OK,
 *  FLUX_ERR_CALLBACK_FAILED, FLUX_ERR_TOO_DEEP), or of flux_enqueue()'s
 *  refusal (FLUX_ERR_INVALID_ARGUMENT, FLUX_ERR_NO_MEMORY,
 *  FLUX_ERR_ALREADY_DISPATCHING: see flux_enqueue()). It runs on the
 *  thread that dispatched the payload, with no callback running; the
 *  dispatcher is still dispatching (see flux_enqueue()). A payload
 *  flux_enqueue() refuses has its done run at once, inside that call, on
 *  the caller's thread -- inside the caller's callback when it was called
 *  from one (say, FLUX_ERR_NO_MEMORY); a flux_wait_for() on d from a done is
 *  refused all the same (see "Observer"). A done that flux_enqueue(NULL, ...)
 *  refuses has no dispatcher: it runs as part of its caller, whose waits it
 *  shares. When status is not
 *  FLUX_OK, flux_last_error() describes the failure while it runs (a
 *  string it returns then goes when done returns, and the thread's earlier
 *  record is back: copy what you keep). Like
 *  every function the library calls, it must return (see "Returning").
 *  (Changed in 0.2: done takes the call's context, like every other
 *  callback of this header, so a binding finds its record for the call in
 *  it, never by the payload's address.) */
typedef void (*flux_done_fn)(void *context, void *payload, flux_status status);

/**
 * Dispatches payload now, or after the running dispatch, never waiting.
 *
 * - Idle: dispatches payload on the calling thread (exactly as
 *   flux_dispatch()), runs done(context, payload, status), then runs every
 *   payload that got queued meanwhile, and returns the status of payload's
 *   own dispatch.
 * - A dispatch is running (on this thread -- from a callback or a done -- or
 *   on another): appends payload to the dispatcher's FIFO queue and returns
 *   FLUX_OK at once.
 *
 * The thread running a dispatch runs every queued payload, in FIFO order,
 * each a full dispatch of its own (flux_wait_for() works in each; callbacks
 * registered meanwhile take part), after its own dispatch and before its
 * flux_dispatch() or flux_enqueue() returns; then done(context, payload,
 * status) for that payload, with the context given with it. A queued
 * dispatch that fails does not stop the queue. Every accepted payload is
 * dispatched exactly once: one enqueued from another thread just as the
 * running dispatch ends is either run by that thread or finds the
 * dispatcher idle and is dispatched by its caller.
 *
 * From the outermost call's start until it returns, draining included, the
 * dispatcher is dispatching: flux_is_dispatching() is 1, flux_dispatch()
 * (even from a done) fails with FLUX_ERR_ALREADY_DISPATCHING, flux_enqueue()
 * queues, and flux_dispatcher_destroy() is refused. A thread that keeps
 * enqueueing keeps the draining thread busy.
 *
 * @param payload  opaque, may be NULL; callbacks receive it as their payload.
 *                 It stays the caller's and must stay valid until done runs.
 * @param done     may be NULL. Runs exactly once per call (see flux_done_fn).
 * @param context  passed to done as given; may be NULL. The library never
 *                 reads it; done is where the caller lets go of it, whatever
 *                 the outcome.
 * @return FLUX_OK: dispatched with success, or queued.
 *         FLUX_ERR_CALLBACK_FAILED: dispatched at once, and a callback
 *         failed (as flux_dispatch()).
 *         FLUX_ERR_TOO_DEEP: dispatched at once, and a flux_wait_for()
 *         chain went too deep for the stack (see "Depth"; as
 *         flux_dispatch()).
 *         FLUX_ERR_INVALID_ARGUMENT: d is NULL, or is being destroyed.
 *         FLUX_ERR_NO_MEMORY: the queue could not grow.
 *         FLUX_ERR_ALREADY_DISPATCHING: in a child process, d was being
 *         dispatched by another thread of the parent at the fork (see
 *         "fork"): no dispatch will ever run its queue.
 *         Whatever it returns, done(context, payload, status) has already
 *         run, except when payload was queued: then it runs on the thread
 *         that dispatches it.
 * Threads: any thread, from inside a callback or a done too; never waits for
 *          a running dispatch.
 */
FLUX_API flux_status flux_enqueue(flux_dispatcher *d, void *payload, flux_done_fn done,
                                  void *context);

/* ------------------------------------------------------------------------ */
/* Observer                                                                 */
/* ------------------------------------------------------------------------ */

/** The version of struct flux_observer this header describes. */
#define FLUX_OBSERVER_VERSION 1

/**
 * Hooks that watch a dispatcher: for logging, tracing, profiling. Events
 * arrive in this exact order, on the dispatching thread:
 *
 *   dispatch_begin(payload);
 *   for each callback the dispatch runs: callback_begin(token) ...
 *   callback_end(token, result), result being the callback's return value;
 *   a callback's flux_wait_for() first reports wait_for(waiter, tokens,
 *   count) -- the waiter's token and the array as given, on entry, whatever
 *   the call then returns -- then the begin/end pairs of the callbacks it
 *   runs, nested inside the waiter's pair;
 *   dispatch_end(payload, status) last, status being what the dispatch ends
 *   with (FLUX_OK, FLUX_ERR_CALLBACK_FAILED, or FLUX_ERR_TOO_DEEP when a
 *   flux_wait_for() chain went too deep: see "Depth").
 *
 * Queued dispatches (flux_enqueue()) report their own begin and end. A
 * flux_dispatch() refused with FLUX_ERR_ALREADY_DISPATCHING reports nothing;
 * neither does a flux_wait_for() that fails with FLUX_ERR_INVALID_ARGUMENT.
 * Any hook may be NULL. Hooks may call any function of this header that a
 * callback may call, except flux_wait_for(): only a callback waits, so from
 * any hook (as from a done) it fails with FLUX_ERR_NOT_DISPATCHING, runs
 * nothing and reports nothing. A callback_begin that unregisters the
 * callback it announces: that callback does not run, its callback_end
 * follows at once with result 0, and a flux_wait_for() that was running it
 * goes on as if it had. The tokens array is valid only during the wait_for
 * call.
 */
typedef struct flux_observer {
    int version; /**< FLUX_OBSERVER_VERSION */
    void (*dispatch_begin)(void *context, const void *payload);
    void (*dispatch_end)(void *context, const void *payload, flux_status status);
    void (*callback_begin)(void *context, flux_token token);
    void (*callback_end)(void *context, flux_token token, int result);
    void (*wait_for)(void *context, flux_token waiter, const flux_token *tokens,
                     size_t count);
} flux_observer;

/**
 * Sets d's observer (one per dispatcher): the hooks are copied, and each is
 * called with context. hooks == NULL clears it. With no observer the
 * dispatch loop pays nothing for the feature (the observed loop is chosen
 * once per dispatch).
 *
 * Idle, it takes effect at once; set during a dispatch (from a callback or
 * another thread), it takes effect from the next dispatch -- a queued one
 * included -- and the running one keeps its observer to the end.
 *
 * Ownership: context is handed over whatever the outcome. destroy(context),
 * when destroy is not NULL, runs exactly once: when this observer is replaced
 * or cleared, or d is destroyed; at once when this call fails, or when hooks
 * is NULL (clearing takes no context), as the call's last use of d: outside
 * a dispatch, that destroy may close or destroy d. A context replaced or
 * cleared during a dispatch is destroyed when the outermost flux_dispatch()
 * or flux_enqueue() returns, outside the dispatch.
 *
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: d is NULL, or is being destroyed;
 *         hooks->version is not FLUX_OBSERVER_VERSION.
 *         FLUX_ERR_NO_MEMORY: set during a dispatch, and there was no memory
 *         to note the change (the running call keeps its observer, and the
 *         one set before, if any, stays pending). Idle, this allocates
 *         nothing and cannot run out of memory.
 *         FLUX_ERR_ALREADY_DISPATCHING: in a child process, d was being
 *         dispatched by another thread of the parent at the fork (see
 *         "fork"): no dispatch will ever end to install the change, so it
 *         is refused (clearing too) and the context destroyed at once.
 * Threads: any thread, from inside a callback or a hook too; never waits.
 */
FLUX_API flux_status flux_dispatcher_set_observer(flux_dispatcher *d,
                                                  const flux_observer *hooks,
                                                  void *context,
                                                  flux_destroy destroy);

/* ------------------------------------------------------------------------ */
/* Trampolines and dynamic calls (libffi)                                   */
/* ------------------------------------------------------------------------ */

/*
 * For dynamic hosts -- an interpreter with one generic C entry point, a plugin
 * system that learns signatures at run time -- libflux makes native function
 * pointers of any signature below whose calls land in one generic handler
 * (flux_closure_create()), and calls function pointers whose signature is
 * known only at run time (flux_call()). Both are built on libffi.
 *
 * Signatures
 * ----------
 * A signature is a NUL-terminated string "R(A...)": one return type letter,
 * '(', zero to FLUX_SIGNATURE_MAX_ARGS argument type letters, ')', and
 * nothing after it. No spaces. The signature ends at its first NUL byte:
 * "i(p)\0junk" is read as "i(p)", so a binding whose strings may contain
 * NUL (Python's, say) must refuse those itself. One letter a type:
 *
 *     v  void        (return type only)
 *     i  int32_t     I  uint32_t
 *     l  int64_t     L  uint64_t
 *     z  size_t
 *     f  float       d  double
 *     p  void *      (any data pointer)
 *
 * flux_callback is "i(pp)", flux_destroy "v(p)", flux_closure_handler
 * "v(ppp)". A malformed signature (NULL, empty, no '(' or ')', an unknown
 * letter, 'v' as an argument, more than one return letter, anything after
 * ')', too many arguments) makes the call fail with FLUX_ERR_INVALID_ARGUMENT
 * and a flux_last_error() that quotes the signature and names the 0-based
 * position and the character found there, e.g.
 *     flux_closure_create: signature "i(pq)": unknown type letter 'q' at
 *     position 3 (expected one of v, i, I, l, L, z, f, d, p or ')')
 *     flux_call: signature "i(p": expected ')' at position 3, found the end
 *     of the signature
 *
 * Values
 * ------
 * Arguments: args[i] points at the i-th argument, stored as its natural C
 * type (int32_t for 'i', float for 'f', void * for 'p', ...). This holds for
 * the args a handler receives and for the args given to flux_call().
 *
 * Return values: the handler of a trampoline writes a value of the natural C
 * type at ret, which points to FLUX_CLOSURE_RET_SIZE (8) bytes of storage,
 * aligned for every type above and zero-filled before each call; the
 * trampoline then converts it as the native ABI requires (an 'i' or 'I' result
 * is sign- or zero-extended to libffi's ffi_arg). So a handler that writes
 * nothing returns 0 (0.0, NULL), and writing an int64_t for an 'i' return is
 * harmless (on little-endian machines it even returns the low 32 bits). For a
 * 'v' return, ret is NULL. flux_call() stores the result as its natural C type
 * at ret (4 bytes for 'i', 'I' and 'f'; 8 for 'l', 'L' and 'd'; sizeof(size_t)
 * and sizeof(void *) for 'z' and 'p'), narrowing libffi's ffi_arg itself.
 */

/** The most arguments a signature may have. */
#define FLUX_SIGNATURE_MAX_ARGS 16

/** The bytes a flux_closure_handler may write through ret. */
#define FLUX_CLOSURE_RET_SIZE 8

/** A trampoline. Opaque: create with flux_closure_create(). */
typedef struct flux_closure flux_closure;

/** Called for every call of a trampoline. userdata is the pointer given to
 *  flux_closure_create(); args[i] points at the i-th argument's value (args is
 *  not meaningful when the signature has no arguments); write the return
 *  value, when the signature has one, through ret (NULL for a 'v' return). See
 *  "Values" above for the exact rule. The pointers are valid only during the
 *  call. */
typedef void (*flux_closure_handler)(void *userdata, void *ret, void **args);

/**
 * Creates a trampoline: a native function of the given signature (see
 * flux_closure_code()) whose every call runs handler(userdata, ret, args) and
 * returns what the handler wrote. Many trampolines may share one handler and
 * tell each other apart by their userdata. A trampoline of signature "i(pp)"
 * is a flux_callback: register it with flux_register() (context NULL, or any
 * other) like any callback; its non-zero return aborts a dispatch and it may
 * call flux_wait_for().
 *
 * The trampoline's memory (the executable code, libffi's call description,
 * handler, userdata and destroy) stays at a fixed address until
 * flux_closure_destroy(); nothing is allocated per call.
 *
 * @param signature  "R(A...)", see "Signatures" above.
 * @param handler    must not be NULL.
 * @param userdata   passed to handler and destroy; may be NULL. Ownership
 *                   passes to the closure whatever the outcome.
 * @param destroy    called once with userdata by flux_closure_destroy(), or
 *                   at once if this call fails; may be NULL.
 * @param out        receives the closure, owned by the caller; must not be
 *                   NULL.
 * @return FLUX_OK.
 *         FLUX_ERR_INVALID_ARGUMENT: handler or out is NULL; the signature is
 *         NULL or malformed (the message names the position).
 *         FLUX_ERR_NO_MEMORY: no memory, or libffi could not get executable
 *         memory for the trampoline.
 *         On any error, destroy(userdata) has already run and *out, if out is
 *         not NULL, is NULL.
 * Threads: any thread, from inside a callback or a handler too. The
 *          trampoline may be called from any thread, by several at once; the
 *          handler runs on the calling thread.
 */
FLUX_API flux_status flux_closure_create(const char *signature,
                                         flux_closure_handler handler,
                                         void *userdata, flux_destroy destroy,
                                         flux_closure **out);

/**
 * @return the trampoline's native function pointer: cast it to the function
 *         type its signature describes (e.g. flux_callback for "i(pp)") and
 *         call it; through uintptr_t, as ISO C has no direct conversion from
 *         an object pointer to a function pointer. Valid until
 *         flux_closure_destroy(closure). NULL when closure is NULL (and, best
 *         effort, when it was destroyed; see flux_closure_destroy()).
 * Threads: any thread, any time the closure is alive; never fails otherwise.
 */
FLUX_API void *flux_closure_code(const flux_closure *closure);

/**
 * Destroys a trampoline: frees its code and memory, then runs
 * destroy(userdata), once. Afterwards the function pointer from
 * flux_closure_code() must not be called (unregister it from dispatchers
 * first). Destroying NULL is a harmless no-op that returns FLUX_OK.
 *
 * Destroying a closure twice, destroying it while a call through it is still
 * running (on this thread, e.g. from inside its own handler, or on another),
 * or passing a pointer flux_closure_create() did not return, is undefined
 * behaviour, as with free(). As a debugging aid the library tags live
 * closures and returns FLUX_ERR_INVALID_ARGUMENT, changing nothing, when the
 * tag is missing -- which catches a second destroy only while the freed
 * memory has not been reused. Do not rely on it.
 *
 * @return FLUX_OK, and closure is gone.
 *         FLUX_ERR_INVALID_ARGUMENT: closure is not a live closure (best
 *         effort, see above); nothing is done.
 * Threads: any thread, but no call through the trampoline, and no other call
 *          on closure, may be in flight or follow.
 */
FLUX_API flux_status flux_closure_destroy(flux_closure *closure);

/**
 * Calls function, a native function of the given signature, with the
 * arguments args[0..n-1] points at, and stores its result at ret. For a
 * call whose signature is known only at run time; a trampoline's code is a
 * valid function. Nothing is allocated.
 *
 * @param function   the function to call; must not be NULL.
 * @param signature  "R(A...)", see "Signatures" above. It must match the
 *                   function's real type, or the behaviour is undefined.
 * @param ret        storage for the result as its natural C type (see
 *                   "Values" above). May be NULL to discard the result;
 *                   ignored for a 'v' return.
 * @param args       an array of one pointer per argument, each pointing at a
 *                   value of the argument's natural C type; may be NULL only
 *                   when the signature has no arguments.
 * @return FLUX_OK once function has returned.
 *         FLUX_ERR_INVALID_ARGUMENT: function is NULL; the signature is NULL
 *         or malformed (the message names the position); args is NULL but the
 *         signature has arguments. function was not called.
 * Threads: any thread, from inside a callback or a handler too.
 */
FLUX_API flux_status flux_call(void *function, const char *signature, void *ret,
                               void **args);

/* ------------------------------------------------------------------------ */
/* Errors and versions                                                      */
/* ------------------------------------------------------------------------ */

/**
 * @return the name of a status, e.g. "FLUX_ERR_CIRCULAR", in static storage;
 *         "FLUX_ERR_UNKNOWN" for a value that is not a flux_status.
 * Threads: any thread, any time.
 */
FLUX_API const char *flux_status_name(flux_status status);

/**
 * @return this thread's message for its most recent failed call, naming the
 *         function and the tokens involved, e.g. "flux_wait_for: circular
 *         dependency: token 3 waits for 1, which is waiting for 3"; "" when no call on
 *         this thread has failed. Successful calls leave it unchanged. The
 *         string belongs to the library and stays valid until this thread's
 *         next failing call or the thread's exit; one read inside a done
 *         (flux_done_fn), describing that done's payload, only until the
 *         done returns (copy it to keep it). Never NULL. In a process
 *         that has used up its thread-specific keys (PTHREAD_KEYS_MAX)
 *         before libflux made its own, failures are not recorded: this
 *         reads a fixed message saying so, and the token and cycle below
 *         read 0, until a key is free again. When memory for the record
 *         runs out, this reads "flux: out of memory while recording an
 *         error message". Messages are made without allocating, except
 *         three, made with memory first, so that a process whose malloc
 *         fails just then is stopped (a known gap): a circular
 *         dependency's, a malformed closure signature's and an unknown
 *         observer version's; so may a process's first failure of a kind,
 *         for which the Swift runtime sets up types.
 * Threads: any thread; each thread has its own message.
 */
FLUX_API const char *flux_last_error(void);

/**
 * @return the token this thread's most recent failed call was about, or 0:
 *         the callback whose failure aborted the dispatch
 *         (FLUX_ERR_CALLBACK_FAILED; for a store's failing reduce or
 *         listener, the store's own token), the first token a call rejected
 *         (FLUX_ERR_UNKNOWN_TOKEN; 0 when that token was 0, and from
 *         flux_store_remove_listener(), whose listener ids are not tokens),
 *         the pending token a wait asked for (FLUX_ERR_CIRCULAR), the token
 *         whose run would have gone too deep (FLUX_ERR_TOO_DEEP); 0 for every
 *         other status. The value a binding reads to build its own error, instead
 *         of parsing flux_last_error(). Same lifetime as flux_last_error();
 *         reading any of the flux_last_error* functions changes nothing.
 * Threads: any thread; each thread has its own.
 */
FLUX_API flux_token flux_last_error_token(void);

/**
 * For FLUX_ERR_CIRCULAR: the cycle as tokens -- the waiter that called
 * flux_wait_for() first, then the token it asked for, then the one that
 * token is waiting for, and so on back to the waiter: "token 3 waits for 1,
 * which is waiting for 2, which is waiting for 3" is {3, 1, 2, 3}, and a
 * callback waiting for itself, {3, 3}. Copies min(length, capacity) tokens
 * into `tokens` (NULL with capacity 0 asks for the length only).
 * @return the cycle's length; 0 when this thread's most recent failed call
 *         was not a cycle (or none failed).
 * Threads: any thread; each thread has its own.
 */
FLUX_API size_t flux_last_error_cycle(flux_token *tokens, size_t capacity);

/**
 * @return the library's version as FLUX_VERSION_NUMBER computes it, so a
 *         program can check that header and library agree.
 */
FLUX_API unsigned flux_version(void);

/** @return the library's version as "MAJOR.MINOR.PATCH", in static storage. */
FLUX_API const char *flux_version_string(void);

#ifdef __cplusplus
}
#endif

#endif /* FLUX_H */
