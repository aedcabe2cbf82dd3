mod support;
fn main() {}
