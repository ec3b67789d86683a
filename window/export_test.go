package window

// Micros is micros, for the external tests.
var Micros = micros
