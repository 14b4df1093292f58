// ds41-gguf-write: the writer of ds41_gguf_write.cpp as a program of its own (ds41-gguf runs the
// same entry as its `write` command).
int gguf_write_main(int argc, char** argv);

int main(int argc, char** argv) { return gguf_write_main(argc, argv); }
