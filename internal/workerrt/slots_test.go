package workerrt

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// waiters is how many tasks wait for a slot.
func (s *slotSet) waiters() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting)
}

// TestSlotsGoToTheHighestPriorityWaiting: with every slot taken, the
// tasks that wait take the slots given back highest priority first, and
// in arrival order within one; an eager take never goes before a waiting
// task; a task whose wait is given up (Stop) takes none, and a slot
// given to it as it gave up passes on.
func TestSlotsGoToTheHighestPriorityWaiting(t *testing.T) {
	t.Parallel()
	s := newSlotSet(1)
	never := make(chan struct{})
	require.True(t, s.take(3, never), "a free slot is taken at once")
	require.False(t, s.tryTake(1), "no slot is free")

	got := make(chan int, 8)
	wait := func(priority, id int) {
		go func() {
			if s.take(priority, never) {
				got <- id
			}
		}()
		// Each waits before the next one comes, so that arrival order is
		// known.
		probe.Until(t, 10*time.Second, "the task to wait", func() bool { return s.waiters() == id })
	}
	wait(1, 1)
	wait(5, 2)
	wait(3, 3)
	wait(5, 4)
	require.False(t, s.tryTake(1), "an eager take never goes before a waiting task")

	var order []int
	for range 4 {
		s.give()
		order = append(order, <-got)
	}
	require.Equal(t, []int{2, 4, 3, 1}, order)
	used, size := s.load()
	require.Equal(t, 1, used)
	require.Equal(t, 1, size)

	// A task that gives up waiting holds no slot.
	stop := make(chan struct{})
	gaveUp := make(chan bool)
	go func() { gaveUp <- s.take(5, stop) }()
	probe.Until(t, 10*time.Second, "the task to wait", func() bool { return s.waiters() == 1 })
	close(stop)
	require.False(t, <-gaveUp)
	s.give()
	used, _ = s.load()
	require.Zero(t, used, "the slot given back is free")
	require.True(t, s.tryTake(1))
}
