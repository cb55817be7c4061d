package workerrt

import (
	"container/heap"
	"sync"
)

// slotSet is the worker's slots of one kind of task (the workflow task
// concurrency or the activity concurrency): a task runs once it holds
// one. The tasks that wait for one take it in the order of their
// priorities, higher first, and in arrival order within one
// (docs/start-policies.md#priorities): a worker can hold more tasks
// than it runs (one more for each of its consumers), and a
// higher-priority task that arrives while lower ones wait goes first.
// Safe for concurrent use.
type slotSet struct {
	mu   sync.Mutex
	size int
	used int
	// waiting are the tasks waiting for a slot; seq orders arrivals.
	waiting slotQueue
	seq     uint64
}

func newSlotSet(size int) *slotSet { return &slotSet{size: size} }

// slotWaiter is one task waiting for a slot: ready is closed once it has
// one.
type slotWaiter struct {
	priority int
	seq      uint64
	ready    chan struct{}
	index    int
}

// take waits for a slot for a task of priority; false, holding none,
// when stop is closed first.
func (s *slotSet) take(priority int, stop <-chan struct{}) bool {
	s.mu.Lock()
	if s.used < s.size && len(s.waiting) == 0 {
		s.used++
		s.mu.Unlock()
		return true
	}
	s.seq++
	w := &slotWaiter{priority: priority, seq: s.seq, ready: make(chan struct{})}
	heap.Push(&s.waiting, w)
	s.mu.Unlock()
	select {
	case <-w.ready:
		return true
	case <-stop:
		s.mu.Lock()
		defer s.mu.Unlock()
		if w.index < 0 {
			// Given a slot as stop came: give it on.
			s.giveLocked()
			return false
		}
		heap.Remove(&s.waiting, w.index)
		return false
	}
}

// tryTake takes n slots if they are all free now and no task waits for
// one (an eager attempt never goes before a waiting task).
func (s *slotSet) tryTake(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.waiting) > 0 || s.used+n > s.size {
		return false
	}
	s.used += n
	return true
}

// give gives back one slot: to the first waiting task, if any.
func (s *slotSet) give() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.giveLocked()
}

func (s *slotSet) giveLocked() {
	if len(s.waiting) > 0 {
		w := heap.Pop(&s.waiting).(*slotWaiter)
		close(w.ready) // the slot passes to it: used stays
		return
	}
	s.used--
}

// load is how many slots are taken, and how many there are.
func (s *slotSet) load() (used, size int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used, s.size
}

// slotQueue is a heap of waiting tasks: higher priority first, then
// earlier arrival.
type slotQueue []*slotWaiter

func (q slotQueue) Len() int { return len(q) }
func (q slotQueue) Less(i, j int) bool {
	if q[i].priority != q[j].priority {
		return q[i].priority > q[j].priority
	}
	return q[i].seq < q[j].seq
}
func (q slotQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *slotQueue) Push(x any) {
	w := x.(*slotWaiter)
	w.index = len(*q)
	*q = append(*q, w)
}
func (q *slotQueue) Pop() any {
	old := *q
	w := old[len(old)-1]
	old[len(old)-1] = nil
	w.index = -1
	*q = old[:len(old)-1]
	return w
}
