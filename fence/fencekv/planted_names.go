package fencekv

// Name of the store's planted defect. Only a build with the plantedbugs tag
// can switch it on, per server, through Config.Testing (planted.go); see
// jepsen/README.md, "Planted bugs".
const BugAcceptLowerToken = "accept-lower-token"
