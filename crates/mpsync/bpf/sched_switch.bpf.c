// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The kernel's half of mpsync's sched interface (papers 001 §3 and 003 §3 ask the
// kernel to tell user space which threads are preempted; Linux has no such API,
// so this program keeps the answer in a map user space reads with one load).
//
// On every context switch (tp_btf/sched_switch) it looks up the outgoing and the
// incoming thread in `tids` (kernel tid -> slot, filled by user space when a
// thread registers with mpsync::sched) and updates that thread's slot in `slots`,
// an array created with BPF_F_MMAPABLE that user space maps read/write:
//
//   outgoing: state = PREEMPTED if it is still runnable (the preempt argument, or
//             prev_state == TASK_RUNNING: a tick or a wake-up took the CPU, or it
//             yielded), BLOCKED otherwise (futex, sleep, I/O); its counters.
//   incoming: state = RUNNING, the CPU, the time.
//
// It also keeps two counts of the registered threads that wait for a CPU right
// now, in the header slot (PRESSURE_SLOT): `preemptions` counts the preempted
// ones (switched out still runnable), `blocks` the woken ones (tp_btf/
// sched_wakeup after blocking, not yet switched in), so user space reads "is
// some registered thread preempted?" — or "... preempted or woken?" — with one
// or two loads. The two are kept apart because a woken thread mostly waits for
// an idle core's wake-up latency (tens of us), not for a busy CPU: the
// skip-queue locks park spinners on the first count only, bounded-steal (whose
// woken queue head may wait for a spinner's slice) on both.
//
// Each slot's `waits` word says whether, and in which count, its thread is
// counted: 0, WAIT_PREEMPTED or WAIT_WOKEN, or WAIT_FREE for a slot no thread
// owns. Every change of `waits` is one atomic exchange or compare-and-swap, and
// each count moves only with a successful one: +1 with 0 -> WAIT_x, -1 with
// WAIT_x -> 0 (or -> WAIT_FREE when the slot is given back). So each count is
// the number of slots whose `waits` holds its value, whatever the order in
// which CPUs run these programs and user space gives slots back, and whatever
// events the kernel does not show us: the counts cannot drift. (Between the
// exchange and the add a reader may see the count one off: a hint for one
// instant, never a drift.) No count is ever taken on a free slot: WAIT_FREE is
// left only by the owner's claim (user space), and every increment starts
// from 0.
//
// Events the kernel does not show. A tracepoint is not always called: a kernel
// may trace nothing while some task is current (seen on a VM whose agent's
// threads are never traced: their switch-out, which is the next thread's
// switch-in, never reaches sched_switch; once a second, when the agent runs),
// and a program is skipped on a recursion miss. A switch-in we do not see would
// leave a running thread's slot saying BLOCKED or PREEMPTED for as long as it
// keeps its CPU. So the thread's own return from __schedule
// (tp_btf/sched_exit_tp, in its own context, before it runs another
// instruction of its own) checks its slot and repairs a missed switch-in
// (counted in the header's `switches_in`); where the kernel lacks that
// tracepoint (before Linux 6.17) a missed switch-in is repaired at the
// thread's next switch-out, and a thread asking about itself is told that it
// runs by user space.
//
// Identity. A slot is its thread's only while the slot's tid *and* tgid are
// the task's: a task of another process that got the same tid (a forked
// child, a reused pid) is not tracked. A registered thread that exits without
// giving its slot back (tp_btf/sched_process_exit) has its slot marked EXITED,
// uncounted and its tid removed, so nothing is tracked into the slot later.
//
// Records. The multi-word record of a slot is written between two increments
// of its `seq` (odd while being written): user space reads a record whose
// `seq` was even and unchanged around the read, never a torn one. The writers
// of one slot are serialized: a thread is switched out and in, and returns
// from __schedule, on the CPU whose runqueue holds it, under that runqueue's
// lock or in its own context; its wake-up changes only `waits`, by one
// compare-and-swap.
//
// Self-contained on purpose: no vmlinux.h, no libbpf headers, no system
// headers (built with -nostdinc). Only clang is needed to build it
// (crates/mpsync/build.rs, with the flags in sched_switch.bpf.flags); task_struct
// is read through CO-RE (preserve_access_index), so the offsets are the running
// kernel's. Machines without clang load the committed build of this file,
// sched_switch.bpf.o: after a change here, testing/bpf_object.py --update
// rebuilds it (and --check, or tests/bpf_object.rs, says when it is stale).
//
// mpsync's layout of a slot; keep in step with `Slot` in
// crates/mpsync/src/sched/ebpf.rs.

typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) __typeof__(val) *name

#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_F_MMAPABLE (1U << 10)

/* The kernel's helpers, by number (include/uapi/linux/bpf.h). */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)8;
static __u64 (*bpf_get_current_pid_tgid)(void) = (void *)14;

struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

/* The process that loaded this copy of the program (its tgid as the kernel
 * sees it), set by the loader: the programs that run in the current task's
 * context look no further for another process's tasks. */
volatile const __u32 mpsync_tgid = 0;

#define MPSYNC_MAX_SLOTS 4096
/* The header slot: never a thread's. `preemptions` is the preempted-now count,
 * `blocks` the woken-now count (see the top), `switches_in` the switch-ins
 * repaired (seen missed by the thread's own return from __schedule),
 * `off_ns` the registered threads that exited without giving their slot back,
 * `on_ns` the record writes that found another write under way (never
 * expected: the writers of a slot are serialized), `tid` a tid whose next
 * switch-in the program is to hide (tests: an event the kernel did not show),
 * `waits` whether to hide it from the repair too, `state` the tid whose
 * repair is skipped once. */
#define PRESSURE_SLOT (MPSYNC_MAX_SLOTS - 2)

/* A slot's `waits`: 0, which header count its thread is in, or free. */
#define WAIT_PREEMPTED 1
#define WAIT_WOKEN 2
#define WAIT_FREE 3

enum {
	STATE_UNKNOWN = 0,
	STATE_RUNNING = 1,
	STATE_PREEMPTED = 2,
	STATE_BLOCKED = 3,
	/* The owner exited without giving the slot back. */
	STATE_EXITED = 4,
};

struct slot {
	__u32 tid;          /* user space: the owner's kernel tid, 0 when free */
	__u32 state;        /* STATE_* */
	__u32 cpu;          /* CPU it last ran on */
	__u32 waits;        /* 0, WAIT_PREEMPTED, WAIT_WOKEN or WAIT_FREE */
	__u64 switches_in;  /* times it got a CPU */
	__u64 preemptions;  /* times it lost the CPU still runnable */
	__u64 blocks;       /* times it left the CPU to wait */
	__u64 off_ns;       /* bpf_ktime_get_ns() when it last left the CPU */
	__u64 on_ns;        /* ... when it last got one */
	__u32 seq;          /* odd while the record is being written */
	__u32 tgid;         /* user space: the owner's process (kernel tgid) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, struct slot);
	__uint(max_entries, MPSYNC_MAX_SLOTS);
} slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__type(key, __u32);
	__type(value, __u32);
	__uint(max_entries, MPSYNC_MAX_SLOTS);
} tids SEC(".maps");

static __attribute__((always_inline)) struct slot *header(void)
{
	__u32 hkey = PRESSURE_SLOT;
	return bpf_map_lookup_elem(&slots, &hkey);
}

/* The slot of the task (tid, tgid), if it is a registered thread's. */
static __attribute__((always_inline)) struct slot *slot_of(__u32 tid, __u32 tgid)
{
	__u32 *idx = bpf_map_lookup_elem(&tids, &tid);
	if (!idx)
		return 0;
	struct slot *s = bpf_map_lookup_elem(&slots, idx);
	/* A slot being handed to another thread, or a task of another process
	 * with the same tid: not ours. */
	if (!s || s->tid != tid || s->tgid != tgid)
		return 0;
	return s;
}

static __attribute__((always_inline)) struct slot *slot_of_task(struct task_struct *t)
{
	return slot_of((__u32)t->pid, (__u32)t->tgid);
}

/* Opens a record write: `seq` odd. The fetching add is a full barrier, so the
 * record's writes are not seen before it. */
static __attribute__((always_inline)) void seq_begin(struct slot *h, struct slot *s)
{
	if ((__sync_fetch_and_add(&s->seq, 1) & 1) && h)
		__sync_fetch_and_add(&h->on_ns, 1);
}

/* Closes it: `seq` even again, after the record's writes (a full barrier
 * too). Found even: another write overlapped ours (never expected). */
static __attribute__((always_inline)) void seq_end(struct slot *h, struct slot *s)
{
	if (!(__sync_fetch_and_add(&s->seq, 1) & 1) && h)
		__sync_fetch_and_add(&h->on_ns, 1);
}

/* Counts `s` in the count `w` (WAIT_PREEMPTED or WAIT_WOKEN), unless it is in
 * one already (or free): 0 -> w, then +1. */
static __attribute__((always_inline)) void count(struct slot *h, struct slot *s, __u32 w)
{
	if (!h || __sync_val_compare_and_swap(&s->waits, 0, w) != 0)
		return;
	if (w == WAIT_PREEMPTED)
		__sync_fetch_and_add(&h->preemptions, 1);
	else
		__sync_fetch_and_add(&h->blocks, 1);
}

/* Takes `s` out of the count it is in, if any: w -> `to` (0, or WAIT_FREE),
 * then -1 in count w. */
static __attribute__((always_inline)) void uncount_to(struct slot *h, struct slot *s, __u32 to)
{
	__u32 w = s->waits;
	if (!h || w == WAIT_FREE || w == to)
		return;
	if (__sync_val_compare_and_swap(&s->waits, w, to) != w)
		return; /* changed meanwhile: whoever changed it counted it */
	if (w == WAIT_PREEMPTED)
		__sync_fetch_and_add(&h->preemptions, -1);
	else if (w == WAIT_WOKEN)
		__sync_fetch_and_add(&h->blocks, -1);
}

static __attribute__((always_inline)) void uncount(struct slot *h, struct slot *s)
{
	uncount_to(h, s, 0);
}

/* `s`'s thread got a CPU (or is found running without a recorded switch-in). */
static __attribute__((always_inline)) void switched_in(struct slot *h, struct slot *s, __u64 now)
{
	seq_begin(h, s);
	uncount(h, s);
	s->on_ns = now;
	s->cpu = bpf_get_smp_processor_id();
	s->switches_in += 1;
	s->state = STATE_RUNNING;
	seq_end(h, s);
}

/* Whether the test knob asks to hide this switch-in of `tid` (once). With
 * the header's `waits` set, hidden from the repair too (as on a kernel without
 * sched_exit_tp): the header's `state` then names the tid not to repair, once. */
static __attribute__((always_inline)) int hidden(struct slot *h, __u32 tid)
{
	if (!h || h->tid != tid || __sync_val_compare_and_swap(&h->tid, tid, 0) != tid)
		return 0;
	if (h->waits)
		h->state = tid;
	return 1;
}

/* TP_PROTO(bool preempt, struct task_struct *prev, struct task_struct *next,
 *          unsigned int prev_state): a BTF raw tracepoint gets them as u64s. */
SEC("tp_btf/sched_switch")
int mpsync_sched_switch(__u64 *ctx)
{
	int preempt = (int)(ctx[0] & 1);
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u32 prev_state = (__u32)ctx[3];
	__u64 now = bpf_ktime_get_ns();
	struct slot *h = header();

	struct slot *s = slot_of_task(prev);
	if (s) {
		int runnable = preempt || prev_state == 0 /* TASK_RUNNING */;
		seq_begin(h, s);
		s->off_ns = now;
		if (runnable) {
			s->preemptions += 1;
			s->state = STATE_PREEMPTED;
			count(h, s, WAIT_PREEMPTED);
		} else {
			s->blocks += 1;
			s->state = STATE_BLOCKED;
			/* Counted, and its switch-in was not seen (see the top). */
			uncount(h, s);
		}
		seq_end(h, s);
	}
	s = slot_of_task(next);
	if (s && !hidden(h, (__u32)next->pid))
		switched_in(h, s, now);
	return 0;
}

/* TP_PROTO(bool is_switch, unsigned long ip): the end of __schedule, in the
 * context of the task that returns from it — the one that was switched in.
 * Repairs a switch-in that sched_switch did not see (see the top). */
SEC("tp_btf/sched_exit_tp")
int mpsync_sched_exit(__u64 *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != mpsync_tgid)
		return 0;
	struct slot *s = slot_of((__u32)id, (__u32)(id >> 32));
	if (!s || s->state == STATE_RUNNING)
		return 0;
	struct slot *h = header();
	if (h && h->state == (__u32)id &&
	    __sync_val_compare_and_swap(&h->state, (__u32)id, 0) == (__u32)id)
		return 0; /* hidden from the repair too (the test knob) */
	if (h)
		__sync_fetch_and_add(&h->switches_in, 1);
	switched_in(h, s, bpf_ktime_get_ns());
	return 0;
}

/* TP_PROTO(struct task_struct *p, bool group_dead): a task exits, in its own
 * context. A registered thread that did not give its slot back (it registered
 * again after its last thread-exit destructor) is forgotten here: nothing is
 * tracked into its slot later, whoever gets its tid. */
SEC("tp_btf/sched_process_exit")
int mpsync_task_exit(__u64 *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	if ((__u32)(id >> 32) != mpsync_tgid)
		return 0;
	struct slot *s = slot_of(tid, (__u32)(id >> 32));
	if (!s)
		return 0;
	struct slot *h = header();
	seq_begin(h, s);
	s->state = STATE_EXITED;
	uncount_to(h, s, WAIT_FREE);
	seq_end(h, s);
	bpf_map_delete_elem(&tids, &tid);
	if (h)
		__sync_fetch_and_add(&h->off_ns, 1);
	return 0;
}

/* TP_PROTO(struct task_struct *p): a blocked thread made runnable again. It
 * waits for a CPU until its switch-in: counted in the woken count. Only a
 * thread the program saw block (a wake-up of a thread that had not switched out
 * yet finds it RUNNING and changes nothing). */
SEC("tp_btf/sched_wakeup")
int mpsync_sched_wakeup(__u64 *ctx)
{
	struct task_struct *p = (struct task_struct *)ctx[0];
	struct slot *s = slot_of_task(p);
	if (!s || s->state != STATE_BLOCKED || s->waits)
		return 0;
	count(header(), s, WAIT_WOKEN);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
