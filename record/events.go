package record

// EventPage bounds one read of the event log (EventsPage).
type EventPage struct {
	// Limit is the most events returned (clamped to 1..1000, default 500).
	Limit int
	// MaxBytes, when > 0, ends the page once its payloads reach about this many bytes; the
	// page holds at least one event. A reader of a log of big steps thus holds one page of
	// bounded size, not Limit big steps.
	MaxBytes int
	// MaxStepBulk, when > 0, sends step payloads whose request, response and text add up to
	// more than this many bytes truncated (StepRecord.Truncate). Their bulky columns are
	// not read at all.
	MaxStepBulk int
}
