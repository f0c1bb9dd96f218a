//! `sluice register SPEC`: registers a JSON dataset spec and prints its id.

use clap::Args;

#[derive(Args, Debug)]
pub struct RegisterArgs {
    #[command(flatten)]
    pub dispatcher: super::DispatcherFlags,
    /// JSON spec file (see docs/dataset-spec.md), or `-` for stdin.
    pub spec: String,
    /// Register under this id instead of a new one.
    #[arg(long)]
    pub dataset_id: Option<String>,
}

pub async fn run(a: RegisterArgs) -> anyhow::Result<()> {
    let def = super::read_spec(&a.spec)?;
    let id = a.dispatcher.client()?.register_dataset(&def, a.dataset_id.as_deref()).await?;
    println!("{id}");
    Ok(())
}
