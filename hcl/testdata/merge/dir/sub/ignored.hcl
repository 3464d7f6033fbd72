garbage {
