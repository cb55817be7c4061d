package store

// SetBasedUpdateRows exposes setBasedUpdateRows to the tests.
const SetBasedUpdateRows = setBasedUpdateRows
