package engine

// What the engine's external tests reach of its machinery.
var (
	RecoverAddress       = recoverAddress
	ParseProposalSubject = parseProposalSubject
)

const MaxReviewErrorBytes = maxReviewErrorBytes
