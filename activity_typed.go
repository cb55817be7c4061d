package harvest

// Activity is a typed activity definition, shared by the worker that
// registers the activity and the workflows that call it, so that a
// misspelt name or an input of the wrong type is a compile error:
//
//	var ChargeCard = harvest.NewActivity[ChargeInput, ChargeResult]("charge_card")
//
//	ChargeCard.Register(w, chargeCard, harvest.ActivityOptions{StartToClose: 10 * time.Second})
//	res, err := ChargeCard.Execute(ctx, ChargeInput{AmountCents: 500}).Get()
//
// The string forms (RegisterActivity, ExecuteActivity) stay: both name the
// same activity.
type Activity[In, Out any] struct {
	name string
}

// NewActivity defines the activity name, taking an In and giving an Out.
func NewActivity[In, Out any](name string) Activity[In, Out] { return Activity[In, Out]{name: name} }

// Name is the activity's name.
func (a Activity[In, Out]) Name() string { return a.name }

// Register registers fn as the activity, as RegisterActivity does.
func (a Activity[In, Out]) Register(w *Worker, fn func(ctx *ActivityContext, input In) (Out, error), opts ...ActivityOptions) {
	RegisterActivity(w, a.name, fn, opts...)
}

// RegisterReconcile registers the activity's reconcile function, as
// RegisterReconcile does.
func (a Activity[In, Out]) RegisterReconcile(w *Worker, fn func(ctx *ActivityContext, input In) (result Out, found bool, err error)) {
	RegisterReconcile(w, a.name, fn)
}

// Execute schedules the activity with input, as ExecuteActivity does, and
// returns a future of its typed result.
func (a Activity[In, Out]) Execute(ctx *WorkflowContext, input In, opts ...ActivityOptions) *ActivityFuture[Out] {
	return &ActivityFuture[Out]{Future: ExecuteActivity(ctx, a.name, input, opts...)}
}

// ActivityFuture is the eventual typed result of an activity. Its Future
// goes in a Selector (AddFuture).
type ActivityFuture[T any] struct {
	*Future
}

// Get blocks until the activity has finished and returns its result; a
// failed activity returns an *ActivityError.
func (f *ActivityFuture[T]) Get() (T, error) {
	var v T
	err := f.Future.Get(&v)
	return v, err
}
