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
// woken queue head may wait for a spinner's slice) on both. Each slot's `waits`
// word says whether, and in which count, its thread is counted: 0, or one of
// WAIT_PREEMPTED and WAIT_WOKEN (never both: a thread is woken only from
// BLOCKED, preempted only while it runs, and its switch-in clears either). It
// is set (and that count incremented) when a thread starts waiting for a CPU,
// cleared (and the same count decremented) when it gets one, or when it blocks
// after a switch-in the program did not see (rarely, a running thread's slot
// still says PREEMPTED; cause unknown, see tests/ebpf.rs), or when user space
// takes the slot back. Different threads' transitions run on different CPUs
// at once: the counts are changed with atomic adds. They cannot drift: each
// count is the number of slots with its bit set, and a thread claims its slot
// (waits 0) and gives it back (user space clears `waits`, with the matching
// decrement, after removing its tid) only while it runs, so no write of the
// program to that slot races those of user space. A thread's own transitions
// are serialized by the runqueue that holds it (switches and wake-ups run
// under that runqueue's lock).
//
// A thread is switched out and in by the CPU whose runqueue holds it, under that
// runqueue's lock, so the writes to one slot never race each other; user space
// reads each field as one aligned 32- or 64-bit load.
//
// Self-contained on purpose: no vmlinux.h, no libbpf headers. Only clang is
// needed to build it (crates/mpsync/build.rs); task_struct is read through CO-RE
// (preserve_access_index), so the offsets are the running kernel's.
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
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static __u32 (*bpf_get_smp_processor_id)(void) = (void *)8;

struct task_struct {
	int pid;
} __attribute__((preserve_access_index));

#define MPSYNC_MAX_SLOTS 4096
/* The header slot: never a thread's; `preemptions` is the preempted-now count,
 * `blocks` the woken-now count (see the top). */
#define PRESSURE_SLOT (MPSYNC_MAX_SLOTS - 2)

/* A slot's `waits`: 0, or which header count its thread is in. */
#define WAIT_PREEMPTED 1
#define WAIT_WOKEN 2

enum {
	STATE_UNKNOWN = 0,
	STATE_RUNNING = 1,
	STATE_PREEMPTED = 2,
	STATE_BLOCKED = 3,
};

struct slot {
	__u32 tid;          /* user space: the owner's kernel tid, 0 when free */
	__u32 state;        /* STATE_* */
	__u32 cpu;          /* CPU it last ran on */
	__u32 waits;        /* 0, WAIT_PREEMPTED or WAIT_WOKEN: which header count */
	__u64 switches_in;  /* times it got a CPU */
	__u64 preemptions;  /* times it lost the CPU still runnable */
	__u64 blocks;       /* times it left the CPU to wait */
	__u64 off_ns;       /* bpf_ktime_get_ns() when it last left the CPU */
	__u64 on_ns;        /* ... when it last got one */
	__u64 _pad2;
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

static __attribute__((always_inline)) struct slot *slot_of(__u32 tid)
{
	__u32 *idx = bpf_map_lookup_elem(&tids, &tid);
	if (!idx)
		return 0;
	struct slot *s = bpf_map_lookup_elem(&slots, idx);
	/* A slot being handed to another thread: not ours any more. */
	if (!s || s->tid != tid)
		return 0;
	return s;
}

/* Takes `s` out of the header count it is in, if any. */
static __attribute__((always_inline)) void uncount(struct slot *h, struct slot *s)
{
	__u32 w = s->waits;
	if (!h || !w)
		return;
	s->waits = 0;
	if (w == WAIT_PREEMPTED)
		__sync_fetch_and_add(&h->preemptions, -1);
	else
		__sync_fetch_and_add(&h->blocks, -1);
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
	__u32 hkey = PRESSURE_SLOT;
	struct slot *h = bpf_map_lookup_elem(&slots, &hkey);

	struct slot *s = slot_of((__u32)prev->pid);
	if (s) {
		int runnable = preempt || prev_state == 0 /* TASK_RUNNING */;
		s->off_ns = now;
		if (runnable) {
			s->preemptions += 1;
			s->state = STATE_PREEMPTED;
			if (h && !s->waits) {
				s->waits = WAIT_PREEMPTED;
				__sync_fetch_and_add(&h->preemptions, 1);
			}
		} else {
			s->blocks += 1;
			s->state = STATE_BLOCKED;
			/* Counted, and its switch-in was not seen (see the top). */
			uncount(h, s);
		}
	}
	s = slot_of((__u32)next->pid);
	if (s) {
		uncount(h, s);
		s->on_ns = now;
		s->cpu = bpf_get_smp_processor_id();
		s->switches_in += 1;
		s->state = STATE_RUNNING;
	}
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
	struct slot *s = slot_of((__u32)p->pid);
	if (!s || s->state != STATE_BLOCKED || s->waits)
		return 0;
	__u32 hkey = PRESSURE_SLOT;
	struct slot *h = bpf_map_lookup_elem(&slots, &hkey);
	if (!h)
		return 0;
	s->waits = WAIT_WOKEN;
	__sync_fetch_and_add(&h->blocks, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
