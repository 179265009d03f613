package fsm

// An Option sets how New and Restore build a State, and how VerifyEntry
// checks an entry. The zero set of options is the release behaviour.
type Option func(*options)

type options struct{ knobs TestingKnobs }

func applyOptions(opts []Option) (o options) {
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithTestingKnobs gives the State built, or the check made, the test
// switches k: planted defects in a build with the plantedbugs tag (the
// State keeps them for its life, and passes them to no other State);
// nothing in a release build, where k is empty. Give every replica the
// same knobs.
func WithTestingKnobs(k TestingKnobs) Option { return func(o *options) { o.knobs = k } }
