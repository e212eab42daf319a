fn main() {
    // Generate the `.tk` parser from src/syntax/grammar.lalrpop into OUT_DIR.
    lalrpop::Configuration::new()
        .use_cargo_dir_conventions()
        .emit_rerun_directives(true)
        .process()
        .expect("lalrpop failed to generate the .tk parser");
}
