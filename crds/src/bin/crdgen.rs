//! Prints every sluice CRD as one multi-document YAML stream, or with `--dir DIR`
//! writes one file per CRD (the chart's `crds/` directory).

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => {
            let mut out = std::io::stdout().lock();
            for crd in sluice_crds::crds() {
                out.write_all(b"---\n")?;
                out.write_all(sluice_crds::crd_yaml(&crd)?.as_bytes())?;
            }
        }
        [flag, dir] if flag == "--dir" => {
            std::fs::create_dir_all(dir)?;
            for (file, yaml) in sluice_crds::crd_files()? {
                std::fs::write(std::path::Path::new(dir).join(file), yaml)?;
            }
        }
        _ => return Err("usage: crdgen [--dir DIR]".into()),
    }
    Ok(())
}
