package syncer

// rule returns the rule named name, or nil.
func (s *Syncer) rule(name string) *windowRule {
	for _, r := range s.ruleList() {
		if r.name == name {
			return r
		}
	}
	return nil
}
