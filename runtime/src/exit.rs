//! The exit codes the runtime's checking tools share (`tokitai-glue`,
//! `tokitai-check-launches`): 0 when what they check holds, 1 when it does
//! not, 2 when they could not check (the reason on stderr).

/// Exit with the code for `outcome` (see the module's documentation).
pub fn exit(outcome: Result<bool, String>) -> ! {
    std::process::exit(match outcome {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("error: {}", e);
            2
        }
    })
}
